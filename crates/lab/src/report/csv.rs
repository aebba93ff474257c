//! The CSV files of a results directory: one header line, one record per line, fields split on
//! commas, optionally double-quoted (a quote inside doubled), as the metric engine writes them.

use thiserror::Error;

/// A CSV file's header and records, as text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    pub header: Vec<String>,
    /// Every record has exactly `header.len()` fields; short records are padded with "".
    pub records: Vec<Vec<String>>,
}

#[derive(Debug, Error, PartialEq)]
pub(crate) enum CsvError {
    #[error("the file is empty (no header line)")]
    Empty,
    #[error("line {line}: {what}")]
    Line { line: usize, what: &'static str },
}

impl Table {
    pub(crate) fn parse(text: &str) -> Result<Table, CsvError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, head) = lines.next().ok_or(CsvError::Empty)?;
        let header: Vec<String> = fields(head.trim_start_matches('\u{feff}'))
            .map_err(|what| CsvError::Line { line: 1, what })?
            .into_iter()
            .map(|h| h.trim().to_owned())
            .collect();
        let mut records = Vec::new();
        for (i, line) in lines {
            let mut record = fields(line).map_err(|what| CsvError::Line { line: i + 1, what })?;
            if record.len() > header.len() {
                return Err(CsvError::Line {
                    line: i + 1,
                    what: "more fields than the header has",
                });
            }
            record.resize(header.len(), String::new());
            records.push(record);
        }
        Ok(Table { header, records })
    }

    /// The index of the column named `name`.
    pub(crate) fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }
}

/// A field as a number: empty, `nan` and `null` are absent.
pub(crate) fn number(field: &str) -> Option<f64> {
    let f = field.trim();
    match f.parse::<f64>() {
        Ok(v) if v.is_finite() => Some(v),
        _ => None,
    }
}

fn fields(line: &str) -> Result<Vec<String>, &'static str> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed"),
                }
            }
            match chars.next() {
                None => {
                    out.push(field);
                    return Ok(out);
                }
                Some(',') => out.push(field),
                Some(_) => return Err("text after a closing quote"),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        out.push(field);
                        return Ok(out);
                    }
                    Some(',') => break,
                    Some(c) => field.push(c),
                }
            }
            out.push(field);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_and_quoted_fields() {
        let t = Table::parse("t_s,sv1,\"A, \"\"x\"\"\"\r\n0,1.5,\n1,2,3\n\n").unwrap();
        assert_eq!(t.header, ["t_s", "sv1", "A, \"x\""]);
        assert_eq!(t.records, [["0", "1.5", ""], ["1", "2", "3"]]);
        assert_eq!(t.column("sv1"), Some(1));
        assert_eq!(number(&t.records[0][2]), None);
        assert_eq!(number(" 2.5 "), Some(2.5));
        assert_eq!(number("nan"), None);
    }

    #[test]
    fn short_records_are_padded_long_ones_refused() {
        let t = Table::parse("a,b,c\n1\n").unwrap();
        assert_eq!(t.records, [["1", "", ""]]);
        assert_eq!(
            Table::parse("a,b\n1,2,3\n"),
            Err(CsvError::Line {
                line: 2,
                what: "more fields than the header has"
            })
        );
        assert!(Table::parse("a\n\"open\n").is_err());
        assert!(Table::parse("a\n\"x\"y\n").is_err());
        assert_eq!(Table::parse("\n\n"), Err(CsvError::Empty));
    }
}
