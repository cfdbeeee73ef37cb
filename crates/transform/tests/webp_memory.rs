//! `webp::working_bytes` is an upper bound of what a conversion takes: converting a picture
//! grows a fresh process's peak resident memory by less than the estimate, for a grayscale
//! PNG, an RGBA PNG (lossless WebP) and a JPEG (lossy). rampart holds that much of the cache's
//! budget before converting, so an estimate below the truth would let conversions take the
//! process past its budget (a 261 KB PNG took 2.8 GB).
//!
//! Each picture is converted in a process of its own (this binary run again for the ignored
//! test `convert_one`): memory freed by one conversion and kept by the allocator would hide the
//! next one's growth.
#![allow(clippy::unwrap_used)]

use std::io::Cursor;
use std::path::PathBuf;
use std::process::Command;

use image::{ImageFormat, RgbImage, RgbaImage};
use rampart_transform::webp::{self, Source};

fn kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn encoded(img: image::DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// Converts the picture `WEBP_CASE` names (`path:png` or `path:jpeg`) and prints the peak
/// growth and the estimate. Run by [`working_bytes_bound_what_a_conversion_takes`].
#[test]
#[ignore = "run by working_bytes_bound_what_a_conversion_takes, one process per picture"]
fn convert_one() {
    let case = std::env::var("WEBP_CASE").unwrap();
    let (path, kind) = case.rsplit_once(':').unwrap();
    let source = if kind == "png" {
        Source::Png
    } else {
        Source::Jpeg
    };
    let data = std::fs::read(path).unwrap();
    let estimate = webp::working_bytes(&data, source).unwrap();
    // The peak so far becomes the current resident set (Linux: 5 → clear_refs resets VmHWM).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = kib("VmRSS:");
    let out = webp::to_webp(&data, source).unwrap();
    let growth = kib("VmHWM:").saturating_sub(before) * 1024;
    println!(
        "growth={growth} estimate={estimate} in={} out={}",
        data.len(),
        out.len()
    );
}

#[test]
fn working_bytes_bound_what_a_conversion_takes() {
    let (w, h) = (2500u32, 2000u32);
    // Noise-like pixels, so libwebp does real work (a flat picture is a special case).
    let px =
        |x: u32, y: u32, k: u32| ((x.wrapping_mul(7919) ^ y.wrapping_mul(104_729) ^ k) % 251) as u8;
    let gray = image::GrayImage::from_fn(w, h, |x, y| image::Luma([px(x, y, 1)]));
    let rgb = RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([px(x, y, 1), px(x, y, 2), px(x, y, 3)])
    });
    let rgba = RgbaImage::from_fn(w, h, |x, y| {
        image::Rgba([px(x, y, 1), px(x, y, 2), px(x, y, 3), px(x, y, 4)])
    });
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let cases = [
        ("gray.png", encoded(gray.into(), ImageFormat::Png), "png"),
        ("rgba.png", encoded(rgba.into(), ImageFormat::Png), "png"),
        ("rgb.jpg", encoded(rgb.into(), ImageFormat::Jpeg), "jpeg"),
    ];
    for (name, data, kind) in cases {
        let path = dir.join(format!("webp-memory-{}-{name}", std::process::id()));
        std::fs::write(&path, &data).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "convert_one",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("WEBP_CASE", format!("{}:{kind}", path.display()))
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |k: &str| -> u64 {
            text.split_whitespace()
                .find_map(|t| t.strip_prefix(k))
                .unwrap_or_else(|| panic!("{name}: no {k} in {text}"))
                .parse()
                .unwrap()
        };
        let (growth, estimate) = (field("growth="), field("estimate="));
        eprintln!(
            "{name}: peak growth {} MiB, estimate {} MiB",
            growth >> 20,
            estimate >> 20
        );
        assert!(
            growth <= estimate,
            "{name}: converting took {growth} bytes, more than the estimate {estimate}"
        );
    }
}
