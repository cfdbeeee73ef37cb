//! Numbers as HTTP/1.1 writes them: decimal lengths and chunk-size lines, formatted on the
//! stack (shared by the server's response writer and the origin client's request writer).

/// `n` in decimal, in `buf`.
pub fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// A chunk-size line: `len` in hex and CRLF.
pub fn chunk_line(len: usize, buf: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut i = 16;
    let mut n = len;
    loop {
        i -= 1;
        buf[i] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    buf[16] = b'\r';
    buf[17] = b'\n';
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(itoa(0, &mut [0; 20]), b"0");
        assert_eq!(itoa(1234567, &mut [0; 20]), b"1234567");
        assert_eq!(itoa(u64::MAX, &mut [0; 20]), b"18446744073709551615");
        assert_eq!(chunk_line(255, &mut [0; 18]), b"ff\r\n");
        assert_eq!(chunk_line(0, &mut [0; 18]), b"0\r\n");
    }
}
