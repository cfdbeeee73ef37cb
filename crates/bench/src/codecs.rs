//! `rampart-bench codecs`: compression ratio and CPU per MB of each codec rampart offers, at
//! several levels, on a corpus of real HTML, CSS and JS files (rampart's own codec code,
//! `rampart-transform`). Each file is compressed on its own, as a response would be; CPU time is
//! the thread's (`CLOCK_THREAD_CPUTIME_ID`), the median of `--rounds` passes over the corpus.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use rampart_cache::encoding::Coding;
use rampart_transform::compress::{compress, Levels};

#[derive(clap::Args, Debug)]
pub struct CodecsArgs {
    /// Directories to take .html, .css and .js files from (default: the Rust book and standard
    /// library pages that rustup installs, a realistic generated site).
    #[arg(long = "dir")]
    dirs: Vec<PathBuf>,
    /// Stop collecting at this many bytes of input.
    #[arg(long, default_value_t = 16 << 20)]
    max_bytes: usize,
    /// Passes over the corpus per codec and level (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// The levels measured: each codec's fast end, rampart's default, and its slow end.
const LEVELS: &[(Coding, &[i32])] = &[
    (Coding::Br, &[1, 4, 5, 6, 9, 11]),
    (Coding::Zstd, &[1, 3, 6, 9, 19]),
    (Coding::Gzip, &[1, 6, 9]),
];

fn default_dirs() -> Vec<PathBuf> {
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let html = Path::new(&sysroot).join("share/doc/rust/html");
    vec![html.join("book"), html.join("std")]
}

fn collect(dir: &Path, out: &mut Vec<(String, Vec<u8>)>, budget: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if *budget == 0 {
            return;
        }
        if p.is_dir() {
            collect(&p, out, budget);
            continue;
        }
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "html" | "css" | "js") {
            continue;
        }
        if let Ok(data) = std::fs::read(&p) {
            if data.len() < 256 || data.len() > *budget {
                continue;
            }
            *budget -= data.len();
            out.push((ext.to_owned(), data));
        }
    }
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One measurement: bytes in, bytes out, CPU per pass.
struct Row {
    coding: Coding,
    level: i32,
    bytes_in: usize,
    bytes_out: usize,
    cpu: Duration,
}

fn measure(
    files: &[(String, Vec<u8>)],
    coding: Coding,
    level: i32,
    rounds: usize,
) -> anyhow::Result<Row> {
    let levels = Levels {
        br: level as u32,
        zstd: level,
        gzip: level as u32,
    };
    let mut times = Vec::with_capacity(rounds);
    let mut bytes_out = 0;
    for _ in 0..rounds.max(1) {
        bytes_out = 0;
        let start = thread_cpu();
        for (_, data) in files {
            bytes_out += compress(coding, levels, data)?.len();
        }
        times.push(thread_cpu() - start);
    }
    times.sort();
    Ok(Row {
        coding,
        level,
        bytes_in: files.iter().map(|(_, d)| d.len()).sum(),
        bytes_out,
        cpu: times[times.len() / 2],
    })
}

pub fn run(args: CodecsArgs) -> anyhow::Result<()> {
    let dirs = if args.dirs.is_empty() {
        default_dirs()
    } else {
        args.dirs
    };
    let mut files = Vec::new();
    let mut budget = args.max_bytes;
    for d in &dirs {
        collect(d, &mut files, &mut budget);
    }
    if files.is_empty() {
        bail!("no .html, .css or .js files under {dirs:?}; pass --dir");
    }
    let count = |ext: &str| files.iter().filter(|(e, _)| e == ext).count();
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    println!(
        "corpus: {} files ({} HTML, {} CSS, {} JS), {:.1} MB, from {}",
        files.len(),
        count("html"),
        count("css"),
        count("js"),
        total as f64 / 1e6,
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "each file compressed on its own; CPU = one thread, median of {} passes\n",
        args.rounds
    );
    println!("| codec | level | size after | saved | CPU ms per MB in | MB/s |");
    println!("|---|---|---|---|---|---|");
    for (coding, levels) in LEVELS {
        for &level in *levels {
            let r = measure(&files, *coding, level, args.rounds)
                .with_context(|| format!("{} level {level}", coding.as_str()))?;
            let mb = r.bytes_in as f64 / 1e6;
            let ms = r.cpu.as_secs_f64() * 1e3;
            println!(
                "| {} | {} | {:.1} % | {:.1} % | {:.2} | {:.0} |",
                r.coding.as_str(),
                r.level,
                100.0 * r.bytes_out as f64 / r.bytes_in as f64,
                100.0 - 100.0 * r.bytes_out as f64 / r.bytes_in as f64,
                ms / mb,
                mb / r.cpu.as_secs_f64().max(1e-9),
            );
        }
    }
    Ok(())
}
