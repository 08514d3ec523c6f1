//! The event language front end on any UTF-8 text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        let _ = clarion_lang::check(src);
    }
});
