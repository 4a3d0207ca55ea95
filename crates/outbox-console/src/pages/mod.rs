//! The console's pages, as compiled `maud` templates: every value is
//! HTML-escaped unless a template says otherwise (none does). One file per
//! page; `layout.rs` holds the frame and the shared pieces.

pub mod dead_letters;
pub mod events;
pub mod layout;
pub mod overview;

pub use layout::View;
