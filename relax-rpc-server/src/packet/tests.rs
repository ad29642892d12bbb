use std::io::Cursor;

use super::*;

#[test]
fn an_exception_is_framed_as_tvm_s_server_frames_it() {
    let bytes = exception("no");
    // count, code, one argument, raw string, length, text
    let mut expected = 22u64.to_le_bytes().to_vec();
    expected.extend(5i32.to_le_bytes());
    expected.extend(1i32.to_le_bytes());
    expected.extend(8i32.to_le_bytes());
    expected.extend(2u64.to_le_bytes());
    expected.extend(b"no");
    assert_eq!(bytes, expected);
    assert_eq!(
        message_length(bytes[..8].try_into().unwrap()) as usize,
        bytes.len() - 8
    );
}

#[test]
fn a_header_is_read_whole_and_a_clean_end_is_not_an_error() {
    let mut stream = Cursor::new(42u64.to_le_bytes().to_vec());
    assert_eq!(read_header(&mut stream).unwrap(), Some(42));
    assert_eq!(read_header(&mut stream).unwrap(), None);
    let mut cut = Cursor::new(vec![1u8, 2, 3]);
    assert_eq!(
        read_header(&mut cut).unwrap_err().kind(),
        io::ErrorKind::UnexpectedEof
    );
}
