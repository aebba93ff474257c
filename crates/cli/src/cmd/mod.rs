pub mod events;
pub mod simnet;
