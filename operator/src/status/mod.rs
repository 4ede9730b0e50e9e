//! Status writing: the translator's desired statuses merged into what the API server holds.

pub mod merge;
pub mod served;
pub mod writer;
