//! Template value, time-weighted: what the devices worked on against the best the job source
//! node offered at the same instants.
//!
//! A device works on the template its latest job came from, from the moment it can hash on it
//! until its next job or its disconnection. Each such stretch inside the measured window adds
//! `value x duration` to the devices' integral, and the node's value over the *same stretch* (its
//! latest template at each instant) to the network's, so both means weigh the same device-time
//! and their difference is what the devices' templates gained or lost. Stretches on a template
//! nobody can identify are left out of both.

use super::merge::tally;

tally! {
    /// Integrals in sats x ns, mergeable.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ValueTally {
        /// Template value the devices worked on, integrated over time (sats x ns).
        pub device_value: u128,
        /// Time covered by `device_value`, in ns.
        pub device_ns: u128,
        /// The node's best template value, integrated over time (sats x ns).
        pub network_value: u128,
        /// Time covered by `network_value`, in ns.
        pub network_ns: u128,
    }
}

impl ValueTally {
    /// Time-weighted mean value of the devices' templates, in sats; `None` over no time.
    pub fn device_mean(&self) -> Option<f64> {
        (self.device_ns > 0).then(|| self.device_value as f64 / self.device_ns as f64)
    }

    /// Time-weighted mean of the node's best template value, in sats; `None` over no time.
    pub fn network_mean(&self) -> Option<f64> {
        (self.network_ns > 0).then(|| self.network_value as f64 / self.network_ns as f64)
    }
}

/// The node's template value as a step function of time, with prefix integrals.
pub(crate) struct NetworkValue {
    times: Vec<u64>,
    values: Vec<u64>,
    /// `prefix[i]` = integral from `times[0]` to `times[i]`.
    prefix: Vec<u128>,
}

impl NetworkValue {
    /// `timeline`: (time, value) of each template the node made, sorted by time.
    pub(crate) fn new(timeline: &[(u64, u64)]) -> Self {
        let mut prefix = Vec::with_capacity(timeline.len());
        let mut acc = 0u128;
        for (i, &(t, _)) in timeline.iter().enumerate() {
            if i > 0 {
                let (t0, v0) = timeline[i - 1];
                acc += u128::from(v0) * u128::from(t - t0);
            }
            prefix.push(acc);
        }
        NetworkValue {
            times: timeline.iter().map(|p| p.0).collect(),
            values: timeline.iter().map(|p| p.1).collect(),
            prefix,
        }
    }

    /// (integral of the value, time it was defined) from `times[0]` to `t`.
    fn upto(&self, t: u64) -> (u128, u128) {
        let i = self.times.partition_point(|&x| x <= t);
        if i == 0 {
            return (0, 0);
        }
        let i = i - 1;
        let v = self.prefix[i] + u128::from(self.values[i]) * u128::from(t - self.times[i]);
        (v, u128::from(t - self.times[0]))
    }

    /// (integral of the value, time it was defined) over `[a, b)`.
    pub(crate) fn over(&self, a: u64, b: u64) -> (u128, u128) {
        let (va, da) = self.upto(a);
        let (vb, db) = self.upto(b);
        (vb - va, db - da)
    }
}

/// Adds a device's stretch `[a, b)` on a template worth `value`, clipped to `[lo, hi)`.
pub(crate) fn add_stretch(
    t: &mut ValueTally,
    net: &NetworkValue,
    (lo, hi): (u64, u64),
    (a, b): (u64, u64),
    value: u64,
) {
    let (a, b) = (a.max(lo), b.min(hi));
    if b <= a {
        return;
    }
    t.device_value += u128::from(value) * u128::from(b - a);
    t.device_ns += u128::from(b - a);
    let (v, d) = net.over(a, b);
    t.network_value += v;
    t.network_ns += d;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_integral_follows_the_steps() {
        let n = NetworkValue::new(&[(10, 100), (20, 300)]);
        assert_eq!(n.over(0, 10), (0, 0));
        assert_eq!(n.over(10, 20), (1000, 10));
        assert_eq!(n.over(15, 25), (500 + 1500, 10));
        assert_eq!(n.over(0, 30), (1000 + 3000, 20));
    }

    #[test]
    fn stretches_weigh_by_time_inside_the_window() {
        let n = NetworkValue::new(&[(0, 200)]);
        let mut t = ValueTally::default();
        add_stretch(&mut t, &n, (10, 40), (0, 20), 100); // 10 ns inside
        add_stretch(&mut t, &n, (10, 40), (20, 100), 190); // 20 ns inside
        assert_eq!(t.device_ns, 30);
        assert_eq!(t.device_mean(), Some((100.0 * 10.0 + 190.0 * 20.0) / 30.0));
        assert_eq!(t.network_mean(), Some(200.0));
    }
}
