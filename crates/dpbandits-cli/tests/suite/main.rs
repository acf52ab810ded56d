//! The CLI's integration tests, in one binary: smoke experiments of every setting, thread-count
//! invariance, bad input, `list` and `bounds`.

mod bai;
mod cli;
mod compare;
mod contextual;
mod ldp;
mod linear;
