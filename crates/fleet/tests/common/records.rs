//! What every test recorder keeps alike of a device's reports, whichever protocol it speaks:
//! shares unanswered (by sequence number) and dropped, readiness, protocol errors. The device's
//! own unit tests include this file too.

/// The `Observer` methods that record into a recorder's `unanswered`,
/// `dropped`, `ready` and `errors` fields; written inside its `impl Observer`.
macro_rules! record_session {
    () => {
        fn share_unanswered(&mut self, _d: u64, _now: Timestamp, seq: u64) {
            self.unanswered.push(seq);
        }
        fn share_dropped(&mut self, _d: u64, _now: Timestamp) {
            self.dropped += 1;
        }
        fn ready(&mut self, _d: u64, _now: Timestamp) {
            self.ready += 1;
        }
        fn protocol_error(&mut self, _d: u64, _now: Timestamp, what: &str) {
            self.errors.push(what.to_owned());
        }
    };
}
