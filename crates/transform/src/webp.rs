//! PNG and JPEG to WebP (docs/arc2.md, "WebP"). Decoding is `image`'s (pure Rust) under hard
//! limits, so a small file that claims a huge picture (a decompression bomb) is refused before
//! any pixel memory is allocated; encoding is libwebp's. A JPEG (a photograph, already lossy)
//! becomes a lossy WebP at quality [`JPEG_QUALITY`]; a PNG (exact pixels: graphics, text,
//! transparency) a lossless one. The EXIF orientation is applied to the pixels; an animated PNG,
//! or a picture with a colour profile other than sRGB, is not converted (the WebP would look
//! different).

use std::io::Cursor;

use image::{ImageDecoder as _, ImageFormat, ImageReader};

/// The picture formats converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Png,
    Jpeg,
}

/// The quality of the WebP made from a JPEG (libwebp's scale, 0–100): what CDNs use for
/// photographs, visually the same as a JPEG at 85–90.
pub const JPEG_QUALITY: f32 = 80.0;

/// The largest picture decoded: WebP's own limit per side, and at most this many bytes of
/// decoded pixels (64 megapixels of RGBA).
pub const MAX_SIDE: u32 = 16_383;
pub const MAX_DECODED_BYTES: u64 = 256 << 20;

/// Why a picture was not converted.
#[derive(Debug, thiserror::Error)]
pub enum WebpError {
    /// The picture is larger than the limits (or claims to be).
    #[error("refused to decode: {0}")]
    TooLarge(String),
    #[error("cannot decode: {0}")]
    Decode(String),
    #[error("cannot encode: {0:?}")]
    Encode(String),
    /// Converting would change the picture.
    #[error("skipped: {0}")]
    Skipped(&'static str),
}

/// An APNG: an `acTL` chunk before the first `IDAT`.
fn is_animated_png(data: &[u8]) -> bool {
    let mut at = 8;
    while at + 8 <= data.len() {
        let len = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]) as usize;
        let kind = &data[at + 4..at + 8];
        if kind == b"acTL" {
            return true;
        }
        if kind == b"IDAT" {
            return false;
        }
        at = at.saturating_add(12).saturating_add(len);
    }
    false
}

/// Bytes per pixel the conversion takes beyond the decoded picture and its RGB(A) copy: the
/// decoder's own buffers and libwebp's (a lossless encode keeps an ARGB copy, hash chains and
/// backward references; a lossy one a YUV(A) copy and per-macroblock state). Measured as peak
/// RSS growth converting 5-megapixel noise-like pictures (the worst case for lossless: 32 and
/// 13 bytes per pixel), with a margin; `tests/webp_memory.rs` checks the estimate holds.
const LIBWEBP_LOSSLESS_PER_PIXEL: u64 = 36;
const LIBWEBP_LOSSY_PER_PIXEL: u64 = 20;

/// The decoder for `data`, under the limits; refuses an animated PNG.
fn decoder(data: &[u8], source: Source) -> Result<impl image::ImageDecoder + '_, WebpError> {
    let format = match source {
        Source::Png => ImageFormat::Png,
        Source::Jpeg => ImageFormat::Jpeg,
    };
    let mut reader = ImageReader::with_format(Cursor::new(data), format);
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODED_BYTES);
    reader.limits(limits);
    if source == Source::Png && is_animated_png(data) {
        return Err(WebpError::Skipped(
            "an animated PNG (only its first frame would survive)",
        ));
    }
    reader.into_decoder().map_err(decode_error)
}

fn decode_error(e: image::ImageError) -> WebpError {
    match e {
        image::ImageError::Limits(l) => WebpError::TooLarge(l.to_string()),
        other => WebpError::Decode(other.to_string()),
    }
}

/// The most memory converting `data` can take at once, from its header alone (no pixel is
/// decoded): the decoded picture (twice when the EXIF orientation turns it), its RGB(A) copy
/// and libwebp's working memory. A picture's file size says nothing of this (a 261 KB
/// grayscale PNG of 16,383² pixels took 2.8 GB to convert): the caller holds this much of a
/// memory budget before [`to_webp`], or does not convert.
pub fn working_bytes(data: &[u8], source: Source) -> Result<u64, WebpError> {
    let decoder = decoder(data, source)?;
    let (w, h) = decoder.dimensions();
    let pixels = u64::from(w) * u64::from(h);
    let decoded = decoder.total_bytes();
    let libwebp = match source {
        Source::Png => LIBWEBP_LOSSLESS_PER_PIXEL,
        Source::Jpeg => LIBWEBP_LOSSY_PER_PIXEL,
    };
    Ok(2 * decoded + pixels * (4 + libwebp))
}

/// `data` (a PNG or JPEG) as WebP.
pub fn to_webp(data: &[u8], source: Source) -> Result<Vec<u8>, WebpError> {
    let mut decoder = decoder(data, source)?;
    // libwebp writes no colour profile: a picture in another colour space than sRGB would
    // change colour. (An embedded sRGB profile changes nothing.)
    if let Ok(Some(icc)) = decoder.icc_profile() {
        if !icc.windows(4).any(|w| w == b"sRGB") {
            return Err(WebpError::Skipped("a colour profile other than sRGB"));
        }
    }
    // The EXIF orientation is applied to the pixels: a WebP carries no EXIF here.
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut picture = image::DynamicImage::from_decoder(decoder).map_err(decode_error)?;
    picture.apply_orientation(orientation);
    let (w, h) = (picture.width(), picture.height());
    let lossless = source == Source::Png;
    // `into_*`: no copy when the picture already is 8-bit RGB(A), and the decoded picture is
    // freed as soon as it is converted.
    let encoded = if picture.color().has_alpha() {
        let rgba = picture.into_rgba8();
        webp::Encoder::from_rgba(&rgba, w, h).encode_simple(lossless, JPEG_QUALITY)
    } else {
        let rgb = picture.into_rgb8();
        webp::Encoder::from_rgb(&rgb, w, h).encode_simple(lossless, JPEG_QUALITY)
    };
    encoded
        .map(|m| m.to_vec())
        .map_err(|e| WebpError::Encode(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbaImage::from_fn(w, h, |x, y| {
            image::Rgba([
                (x % 256) as u8,
                (y % 256) as u8,
                128,
                if x < w / 2 { 255 } else { 90 },
            ])
        });
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap_or_default();
        out.into_inner()
    }

    #[test]
    fn a_png_becomes_a_lossless_webp_with_its_alpha() {
        let src = png(64, 48);
        let webp = to_webp(&src, Source::Png).expect("converted");
        assert_eq!(&webp[..4], b"RIFF");
        assert_eq!(&webp[8..12], b"WEBP");
        // Lossless: libwebp decodes it to the very pixels of the PNG.
        let back = webp::Decoder::new(&webp).decode().expect("decodes");
        assert_eq!((back.width(), back.height()), (64, 48));
        let original = image::load_from_memory_with_format(&src, ImageFormat::Png)
            .expect("png")
            .to_rgba8();
        assert_eq!(&*back, original.as_raw().as_slice());
    }

    #[test]
    fn a_bomb_is_refused_before_decoding() {
        // A valid 1×1 PNG whose header then claims 60,000 × 60,000 pixels (10.8 GB of RGB).
        let mut bomb = png(1, 1);
        // IHDR data starts at byte 16: width, height (big-endian); then fix its CRC.
        bomb[16..20].copy_from_slice(&60_000u32.to_be_bytes());
        bomb[20..24].copy_from_slice(&60_000u32.to_be_bytes());
        let crc = crc32(&bomb[12..29]);
        bomb[29..33].copy_from_slice(&crc.to_be_bytes());
        match to_webp(&bomb, Source::Png) {
            Err(WebpError::TooLarge(why)) => assert!(!why.is_empty()),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_animated_png_is_left_alone() {
        let src = png(4, 4);
        // An `acTL` chunk after IHDR (8 + 25 bytes) makes it an APNG.
        let mut apng = src[..33].to_vec();
        apng.extend_from_slice(&8u32.to_be_bytes());
        apng.extend_from_slice(b"acTL");
        apng.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
        apng.extend_from_slice(&crc32(&apng[37..49]).to_be_bytes());
        apng.extend_from_slice(&src[33..]);
        assert!(matches!(
            to_webp(&apng, Source::Png),
            Err(WebpError::Skipped(_))
        ));
        assert!(to_webp(&src, Source::Png).is_ok());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            to_webp(b"not a picture", Source::Jpeg),
            Err(WebpError::Decode(_))
        ));
        assert!(to_webp(&[0x89, b'P', b'N', b'G', 0, 0], Source::Png).is_err());
    }

    /// CRC-32 (IEEE), for the test's hand-made PNG chunk.
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
