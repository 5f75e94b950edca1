//! The operating system's randomness, read once at load to key the id source
//! (`algo::ids`). The kernel's `getrandom(2)`: it blocks only until the kernel's pool is
//! first initialized, which on a running server has long happened.

use crate::algo::ids::SEED_LEN;

/// `SEED_LEN` bytes from the kernel, or the reason it could not give them (the module
/// then refuses to load: ids from the clock or a counter would be guessable).
pub fn os_seed() -> Result<[u8; SEED_LEN], String> {
    let mut seed = [0u8; SEED_LEN];
    let mut filled = 0usize;
    while let Some(rest) = seed.get_mut(filled..).filter(|r| !r.is_empty()) {
        // SAFETY: getrandom writes at most rest.len() bytes into the buffer we pass.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match usize::try_from(got) {
            Ok(n) if n > 0 => filled += n,
            _ => {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    return Err(format!("getrandom failed: {err}"));
                }
            }
        }
    }
    Ok(seed)
}
