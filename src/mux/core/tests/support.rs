//! Test support for the core: a clock, a registration spec, and frame helpers.
