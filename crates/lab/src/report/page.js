// Records on the root element whether every chart was laid out with a size and has data drawn in
// it (marks in a colour other than the background's and the axes'), so that a headless browser
// (and the CI test that drives one) can tell a rendered report from a broken one; a chart
// without either is also reported on the console.
(function () {
  var neutral = { "": 1, "NONE": 1, "#FFFFFF": 1, "#555555": 1, "#E4E4E4": 1 };
  var charts = document.querySelectorAll("svg.chart");
  var broken = [];
  for (var i = 0; i < charts.length; i++) {
    var svg = charts[i];
    var box = svg.getBoundingClientRect();
    var shapes = svg.querySelectorAll("polyline, circle, rect");
    var marks = 0;
    for (var j = 0; j < shapes.length; j++) {
      var stroke = (shapes[j].getAttribute("stroke") || "").toUpperCase();
      var fill = (shapes[j].getAttribute("fill") || "").toUpperCase();
      if (!neutral[stroke] || !neutral[fill]) {
        marks++;
      }
    }
    var drawn = box.width > 0 && box.height > 0 && marks > 0;
    // Per chart too, so that a test can ask about one chart rather than the page as a whole.
    svg.setAttribute("data-drawn", drawn ? "true" : "false");
    if (!drawn) {
      broken.push(svg.getAttribute("data-chart"));
    }
  }
  var root = document.documentElement;
  root.setAttribute("data-charts", String(charts.length));
  root.setAttribute("data-charts-drawn", String(charts.length - broken.length));
  root.setAttribute("data-charts-check", broken.length === 0 ? "ok" : "failed");
  if (broken.length > 0) {
    console.error("charts without size or content: " + broken.join(", "));
  }
})();
// Records whether anything is wider than the window (the page itself, or a table that would
// need its own scroll bar, whose columns a printout cuts) and which section comes first, so
// that the CI test in a 1280 px headless browser can hold the layout to both.
(function () {
  var root = document.documentElement;
  var wide = [];
  if (root.scrollWidth > root.clientWidth + 1) {
    wide.push("page");
  }
  var boxes = document.querySelectorAll(".table-wrap, section, figure, .finding");
  for (var i = 0; i < boxes.length; i++) {
    var b = boxes[i];
    if (b.scrollWidth > b.clientWidth + 1) {
      var section = b.closest("section");
      wide.push((b.id || b.className || b.tagName) + (section ? " in #" + section.id : ""));
    }
  }
  root.setAttribute("data-overflow", wide.length === 0 ? "none" : wide.join("; "));
  if (wide.length > 0) {
    console.error("wider than the window: " + wide.join("; "));
  }
  var first = document.querySelector("body section");
  root.setAttribute("data-first-section", first ? first.id : "");
})();
