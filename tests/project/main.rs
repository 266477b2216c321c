//! The project kept true from its source text and its artefacts: the floor plan, the key
//! layout and method tables against the guide, the tests the guide cites, `Send + Sync` of the public types, the
//! compile errors a forgotten guard gives, and the operator CLI built and run end to end.

mod citations;
mod cli;
mod compile_fail;
mod every_kind;
mod floor_plan;
mod key_layout;
mod layout;
mod method_table;
mod send_sync;
mod tables;
