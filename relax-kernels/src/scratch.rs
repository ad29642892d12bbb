//! Scratch buffers the kernels keep from call to call on each thread (relax-runtime's
//! pool threads live as long as the thread that calls the model): a buffer allocated
//! afresh on every call pays its page faults and zeroing every time, about 2% of
//! ResNet-50's time.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Runs `body` on this thread's value of `key`, or on a fresh value if it is in use
/// (a kernel called from another on the same thread).
pub(crate) fn reuse<T: Default, R>(
    key: &'static LocalKey<RefCell<T>>,
    body: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut value) => body(&mut value),
        Err(_) => body(&mut T::default()),
    })
}

/// The first `len` values of `buffer`, grown (never shrunk) to hold them. What they
/// hold is left over from earlier use: callers write every value before reading it.
pub(crate) fn prefix(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len {
        buffer.resize(len, 0.0);
    }
    &mut buffer[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static TEST_BUFFER: RefCell<Vec<f32>> = RefCell::default();
    }

    #[test]
    fn buffers_are_kept_and_grown_and_a_nested_use_gets_its_own() {
        let first = reuse(&TEST_BUFFER, |buffer| {
            prefix(buffer, 8).fill(1.0);
            // Nested: the thread's buffer is taken, so this one is fresh.
            reuse(&TEST_BUFFER, |inner| {
                assert!(inner.is_empty());
                prefix(inner, 2).fill(2.0);
            });
            buffer.as_ptr()
        });
        reuse(&TEST_BUFFER, |buffer| {
            assert_eq!(buffer.as_ptr(), first, "the same allocation, kept");
            assert_eq!(prefix(buffer, 4), &[1.0; 4]);
            assert_eq!(prefix(buffer, 12).len(), 12);
            assert_eq!(buffer.len(), 12);
            prefix(buffer, 3);
            assert_eq!(buffer.len(), 12, "never shrunk");
        });
    }
}
