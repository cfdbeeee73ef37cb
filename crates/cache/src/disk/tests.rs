use super::state::*;
use super::*;
use crate::cache_control::ResponseDirectives;
use crate::object::fields;
use crate::vary::Vary;
use http::HeaderValue;
use http::StatusCode;
use rampart_head::Fields;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{SystemTime, UNIX_EPOCH};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "rampart-disk-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        Dir(p)
    }

    fn options(&self, size: u64, min_uses: u32) -> DiskOptions {
        DiskOptions {
            dir: self.0.clone(),
            size,
            min_uses,
            max_object: 1 << 30,
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn object(body: &[u8], vary: Vary) -> Arc<Object> {
    let now = SystemTime::now();
    let mut headers = Fields::new();
    headers.insert("content-type", HeaderValue::from_static("text/plain"));
    headers.insert("etag", HeaderValue::from_static("\"v1\""));
    let f = fields(&headers, &[]);
    Arc::new(Object {
        status: StatusCode::OK,
        headers_charge: f.charge,
        wire: f.wire,
        headers: f.headers,
        body: Bytes::copy_from_slice(body),
        request_time: now,
        response_time: now,
        initial_age: Duration::ZERO,
        lifetime: Duration::from_secs(60),
        directives: ResponseDirectives::default(),
        vary,
        invalidated: AtomicBool::new(false),
        refreshing: AtomicBool::new(false),
        encoded: Box::default(),
        webp: None,
        residency: None,
        disk: DiskMark::default(),
        extent: None,
        tags: Box::default(),
    })
}

fn segment_path(dir: &Path, id: u32, ext: &str) -> PathBuf {
    dir.join(segment_name(id, ext))
}

fn ids_in(dir: &Path) -> std::io::Result<Vec<(u32, bool)>> {
    list_segments(&CacheDir::open(dir)?)
}

fn key(url: &str) -> CacheKey {
    CacheKey::new("example.com", url, false)
}

fn plain(b: Vec<u8>) -> (Bytes, Option<Arc<Residency>>) {
    (Bytes::from(b), None)
}

fn get(d: &DiskStore, url: &str) -> Option<Object> {
    d.lookup(&key(url), &Fields::new(), plain).map(|f| f.object)
}

fn open(dir: &Dir, size: u64, min_uses: u32) -> DiskStore {
    let d = DiskStore::open(dir.options(size, min_uses)).expect("open");
    assert!(d.wait_ready(Duration::from_secs(10)), "warm");
    d
}

fn body_of(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn objects_come_back_after_a_restart_from_summaries_and_from_records() {
    let dir = Dir::new("restart");
    let d = open(&dir, 64 << 20, 1);
    // Enough to seal a few 2 MiB segments and leave one half written.
    for i in 0..100 {
        d.offer(
            &key(&format!("/o{i}")),
            None,
            &object(&body_of(i, 50_000), Vary::None),
        );
        if i % 20 == 19 {
            d.flush();
        }
    }
    d.flush();
    let written = d.stats().writes;
    assert_eq!(written, 100, "{:?}", d.stats());
    let got = get(&d, "/o7").expect("hit before restart");
    assert_eq!(got.body, body_of(7, 50_000));
    assert_eq!(
        got.headers.get("etag").map(|v| v.as_bytes()),
        Some(&b"\"v1\""[..])
    );
    assert!(
        !got.disk.pending(),
        "an object from disk is not written again"
    );
    d.close();
    drop(d);
    let idx = std::fs::read_dir(&dir.0)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "idx"))
        })
        .count();
    assert!(idx >= 1, "sealed segments have summaries");

    let d = open(&dir, 64 << 20, 1);
    let s = d.stats();
    assert_eq!(s.objects, 100, "{s:?}");
    assert!(s.warm_micros > 0);
    for i in 0..100 {
        let got = get(&d, &format!("/o{i}")).unwrap_or_else(|| panic!("/o{i} after restart"));
        assert_eq!(got.body, body_of(i, 50_000), "/o{i}");
    }
    assert!(get(&d, "/never").is_none());
    // The scanned segment got its summary: a third start reads summaries only.
    d.close();
    let ids = ids_in(&dir.0).expect("list");
    for (id, _) in ids {
        let b = std::fs::read(segment_path(&dir.0, id, "idx")).expect("summary");
        assert!(record::decode_summary(&b, id).is_some());
    }
}

#[test]
fn a_torn_or_altered_record_is_never_served() {
    let dir = Dir::new("torn");
    let d = open(&dir, 64 << 20, 1);
    for i in 0..5 {
        d.offer(
            &key(&format!("/t{i}")),
            None,
            &object(&body_of(i, 10_000), Vary::None),
        );
    }
    d.flush();
    d.close();
    drop(d);
    // A crash in the middle of the last record: cut it.
    let ids = ids_in(&dir.0).expect("list");
    let seg = segment_path(&dir.0, ids.last().expect("a segment").0, "seg");
    let len = std::fs::metadata(&seg).expect("seg").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open");
    f.set_len(len - 3000).expect("cut");
    drop(f);
    let d = open(&dir, 64 << 20, 1);
    for i in 0..4 {
        assert_eq!(
            get(&d, &format!("/t{i}")).expect("whole").body,
            body_of(i, 10_000)
        );
    }
    assert!(get(&d, "/t4").is_none(), "the torn record is gone");
    assert!(d.stats().errors >= 1);
    // A byte of a body altered behind rampart's back: a miss, counted, never the bytes.
    let seg_bytes = std::fs::read(&seg).expect("read");
    let at = seg_bytes.len() / 2;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open");
    f.write_all_at(&[seg_bytes[at] ^ 0xff], at as u64)
        .expect("write");
    let errors = d.stats().errors;
    let served: Vec<_> = (0..4).filter_map(|i| get(&d, &format!("/t{i}"))).collect();
    assert_eq!(served.len(), 3, "the altered one is a miss");
    for o in &served {
        assert!((0..4).any(|i| o.body == body_of(i, 10_000)));
    }
    assert_eq!(d.stats().errors, errors + 1);
    // A segment removed behind rampart's back: misses from then on, no panic.
    std::fs::remove_file(&seg).expect("rm");
    drop(d);
    let d = open(&dir, 64 << 20, 1);
    assert!(get(&d, "/t0").is_none());
    // And a new write works.
    d.offer(&key("/new"), None, &object(b"fresh", Vary::None));
    d.flush();
    assert_eq!(get(&d, "/new").expect("new").body, &b"fresh"[..]);
}

#[test]
fn purges_reach_the_disk_and_survive_a_restart() {
    let dir = Dir::new("purge");
    let d = open(&dir, 64 << 20, 1);
    for url in ["/blog/1", "/blog/2", "/shop/1", "/soft", "/exact"] {
        d.offer(&key(url), None, &object(url.as_bytes(), Vary::None));
    }
    d.offer(
        &CacheKey::new("other.com", "/blog/1", false),
        None,
        &object(b"other", Vary::None),
    );
    d.flush();
    d.purge(
        &PurgeScope::Prefix {
            host: b"example.com".to_vec(),
            prefix: b"/blog/".to_vec(),
        },
        false,
    );
    d.purge(&PurgeScope::Exact(key("/exact")), false);
    d.purge(&PurgeScope::Exact(key("/soft")), true);
    let check = |d: &DiskStore| {
        assert!(get(d, "/blog/1").is_none());
        assert!(get(d, "/blog/2").is_none());
        assert!(get(d, "/exact").is_none());
        assert!(get(d, "/shop/1").is_some());
        let soft = get(d, "/soft").expect("soft-purged stays");
        assert!(!soft.is_fresh(SystemTime::now()), "but stale");
        let other = CacheKey::new("other.com", "/blog/1", false);
        assert!(d.lookup(&other, &Fields::new(), plain).is_some());
    };
    check(&d);
    d.close();
    drop(d);
    let d = open(&dir, 64 << 20, 1);
    check(&d);
    // Written after the purge: served.
    std::thread::sleep(Duration::from_millis(2));
    d.offer(&key("/blog/1"), None, &object(b"new", Vary::None));
    d.flush();
    assert_eq!(get(&d, "/blog/1").expect("new one").body, &b"new"[..]);
    // Everything.
    d.purge(&PurgeScope::Everything, false);
    assert!(get(&d, "/shop/1").is_none());
    assert_eq!(d.stats().objects, 0);
}

#[test]
fn the_size_is_never_exceeded() {
    let dir = Dir::new("size");
    let size = 16 << 20;
    let d = open(&dir, size, 1);
    for i in 0..400 {
        d.offer(
            &key(&format!("/s{i}")),
            None,
            &object(&body_of(i, 100_000), Vary::None),
        );
        if i % 50 == 0 {
            d.flush();
        }
        let used = d.stats().used;
        assert!(used <= size, "{used} > {size}");
    }
    d.flush();
    let s = d.stats();
    assert!(s.reclaimed_segments > 0, "{s:?}");
    let on_disk: u64 = std::fs::read_dir(&dir.0)
        .expect("dir")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    assert!(on_disk <= size, "files {on_disk} > {size}");
    assert_eq!(on_disk, s.used, "the count is the files' size");
    // The newest are there, the oldest reclaimed.
    assert!(get(&d, "/s399").is_some());
    assert!(get(&d, "/s0").is_none());
    assert!(s.objects < 400 && s.objects > 100, "{s:?}");
}

#[test]
fn variants_are_kept_apart_and_a_new_vary_replaces_them() {
    let dir = Dir::new("vary");
    let d = open(&dir, 64 << 20, 1);
    let mut h = Fields::new();
    h.insert(
        http::header::VARY,
        HeaderValue::from_static("accept-language"),
    );
    let vary = Vary::parse(&h);
    let req = |lang: &'static str| {
        let mut r = Fields::new();
        r.insert("accept-language", HeaderValue::from_static(lang));
        r
    };
    for lang in ["en", "fr"] {
        let v = vary.variant_key(&req(lang)).expect("variant");
        d.offer(&key("/v"), Some(&v), &object(lang.as_bytes(), vary.clone()));
    }
    d.flush();
    for lang in ["en", "fr"] {
        let f = d
            .lookup(&key("/v"), &req(lang), plain)
            .expect("variant hit");
        assert_eq!(f.object.body, lang.as_bytes());
        assert_eq!(f.variant, vary.variant_key(&req(lang)));
    }
    assert!(d.lookup(&key("/v"), &req("de"), plain).is_none());
    d.close();
    drop(d);
    let d = open(&dir, 64 << 20, 1);
    let f = d
        .lookup(&key("/v"), &req("fr"), plain)
        .expect("after restart");
    assert_eq!(f.object.body, &b"fr"[..]);
    // Stored again without Vary: the variants are gone.
    d.offer(&key("/v"), None, &object(b"one", Vary::None));
    d.flush();
    let f = d.lookup(&key("/v"), &req("fr"), plain).expect("plain");
    assert_eq!(f.object.body, &b"one"[..]);
}

#[test]
fn one_use_is_not_enough_to_be_written() {
    let dir = Dir::new("admit");
    let d = open(&dir, 64 << 20, 2);
    let o = object(b"once", Vary::None);
    d.offer(&key("/a"), None, &o);
    d.flush();
    assert_eq!(d.stats().writes, 0);
    assert_eq!(d.stats().not_admitted, 1);
    assert!(o.disk.pending());
    d.offer(&key("/a"), None, &o);
    d.flush();
    assert_eq!(d.stats().writes, 1);
    assert!(!o.disk.pending());
    // Offered again: written once.
    d.offer(&key("/a"), None, &o);
    d.flush();
    assert_eq!(d.stats().writes, 1);
    // A rule that keeps its objects off the disk.
    let never = Arc::new(Object {
        disk: DiskMark::never(),
        ..Arc::into_inner(object(b"x", Vary::None)).expect("one")
    });
    for _ in 0..3 {
        d.offer(&key("/never"), None, &never);
    }
    d.flush();
    assert!(get(&d, "/never").is_none());
}

#[test]
fn one_process_at_a_time_and_the_next_takes_over_on_close() {
    let dir = Dir::new("lock");
    let first = open(&dir, 64 << 20, 1);
    first.offer(&key("/x"), None, &object(b"x", Vary::None));
    first.flush();
    let second = DiskStore::open(dir.options(64 << 20, 1)).expect("open");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(second.state(), State::Waiting);
    assert!(get(&second, "/x").is_none(), "nothing before the lock");
    first.close();
    assert!(second.wait_ready(Duration::from_secs(5)));
    assert_eq!(get(&second, "/x").expect("taken over").body, &b"x"[..]);
}

/// Reads a large object's whole body through its extent, a chunk at a time.
fn read_all(e: &Extent) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    while (out.len() as u64) < e.len() {
        let b = e.read(out.len() as u64, 1 << 20)?;
        assert!(!b.is_empty());
        out.extend_from_slice(&b);
    }
    Ok(out)
}

fn write_large(d: &DiskStore, url: &str, body: &[u8]) {
    let mut w = d
        .begin_large(&key(url), Some(body.len() as u64))
        .expect("taken");
    for piece in body.chunks(65_536) {
        assert!(w.push(Bytes::copy_from_slice(piece)));
        // The writer keeps up (a test's queue never fills).
        while w.queue.bytes.load(Ordering::Relaxed) > 4 << 20 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let head = object(b"", Vary::None);
    w.finish(key(url), None, head);
}

#[test]
fn large_objects_stream_from_their_own_files_and_ranges_read_only_their_chunks() {
    let dir = Dir::new("large");
    // 1 GiB: segments of 32 MiB, so a 20 MiB object is a large one.
    let d = open(&dir, 1 << 30, 1);
    let body = body_of(3, 20 * (1 << 20) + 12_345);
    write_large(&d, "/big", &body);
    d.flush();
    let f = d
        .lookup(&key("/big"), &Fields::new(), plain)
        .unwrap_or_else(|| panic!("large hit: {:?}", d.stats()));
    assert!(f.object.body.is_empty(), "the body stays on disk");
    let e = f.object.extent.clone().expect("an extent");
    assert_eq!(e.len(), body.len() as u64);
    assert_eq!(read_all(&e).expect("reads"), body);
    // A range in the middle: the chunk it is in, from the range's start.
    let read_before = d.stats().read_bytes;
    let r = e.read(1_000_000, 100).expect("range");
    assert_eq!(&r[..], &body[1_000_000..1_000_100]);
    assert_eq!(
        d.stats().read_bytes - read_before,
        large::CHUNK,
        "one chunk read"
    );
    d.close();
    drop(d);
    // After a restart.
    let d = open(&dir, 256 << 20, 1);
    let f = d
        .lookup(&key("/big"), &Fields::new(), plain)
        .expect("after restart");
    let e = f.object.extent.clone().expect("an extent");
    assert_eq!(read_all(&e).expect("reads"), body);
    // A byte altered behind rampart's back: that chunk is refused, never sent.
    let path = segment_path(&dir.0, ids_in(&dir.0).expect("ls")[0].0, "big");
    let f2 = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f2.write_all_at(&[body[600_000] ^ 1], 600_000)
        .expect("write");
    assert!(e.read(512 << 10, 10).is_err(), "the altered chunk");
    assert!(e.read(0, 10).is_ok(), "the others");
    // Truncated behind rampart's back: a miss from then on, and removed at the next start.
    f2.set_len(2_000_000).expect("truncate");
    assert!(d.lookup(&key("/big"), &Fields::new(), plain).is_none());
    d.close();
    drop(d);
    let d = open(&dir, 1 << 30, 1);
    assert!(d.lookup(&key("/big"), &Fields::new(), plain).is_none());
    assert!(!path.exists());
    assert_eq!(d.stats().used, 0, "{:?}", d.stats());
}

#[test]
fn a_large_write_given_up_leaves_nothing() {
    let dir = Dir::new("large-abort");
    let d = open(&dir, 256 << 20, 1);
    let mut w = d.begin_large(&key("/cut"), None).expect("taken");
    for _ in 0..10 {
        assert!(w.push(Bytes::from(vec![7u8; 65_536])));
    }
    d.flush();
    // Sent to the writer a batch (256 KiB) at a time.
    assert!(d.stats().used >= 512 << 10, "{:?}", d.stats());
    drop(w);
    d.flush();
    assert_eq!(d.stats().used, 0);
    assert!(d.lookup(&key("/cut"), &Fields::new(), plain).is_none());
    let files: Vec<_> = std::fs::read_dir(&dir.0)
        .expect("dir")
        .map(|e| e.expect("e").file_name())
        .filter(|n| n != "lock" && n != "purges.log")
        .collect();
    assert!(files.is_empty(), "{files:?}");
    // A body longer than it said, or than the limit: refused.
    assert!(d.begin_large(&key("/huge"), Some(1 << 40)).is_none());
    let mut w = d.begin_large(&key("/short"), Some(100)).expect("taken");
    assert!(w.push(Bytes::from(vec![1u8; 100])));
    w.finish(key("/short"), None, object(b"", Vary::None));
    d.flush();
    // Finished with 100 bytes: stored (the length is what was pushed).
    assert!(d.lookup(&key("/short"), &Fields::new(), plain).is_some());
}

#[test]
fn an_object_too_large_for_a_segment_gets_its_own_file() {
    let dir = Dir::new("large-mem");
    let d = open(&dir, 16 << 20, 1);
    // Segments of 512 KiB here: a 700 KB body is a large object.
    let body = body_of(9, 700_000);
    d.offer(&key("/m"), None, &object(&body, Vary::None));
    d.flush();
    let f = d.lookup(&key("/m"), &Fields::new(), plain).expect("hit");
    let e = f.object.extent.expect("from its own file");
    assert_eq!(read_all(&e).expect("reads"), body);
}

#[test]
fn a_smaller_size_at_the_next_start_is_honoured_at_once() {
    let dir = Dir::new("shrink");
    let d = open(&dir, 64 << 20, 1);
    for i in 0..400 {
        d.offer(
            &key(&format!("/s{i}")),
            None,
            &object(&body_of(i, 100_000), Vary::None),
        );
    }
    d.flush();
    assert!(d.stats().used > 32 << 20, "{:?}", d.stats());
    d.close();
    drop(d);
    let d = open(&dir, 16 << 20, 1);
    d.flush();
    let used = d.stats().used;
    assert!(used <= 16 << 20, "{used}");
    let on_disk: u64 = std::fs::read_dir(&dir.0)
        .expect("dir")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    assert!(on_disk <= 16 << 20, "files {on_disk}");
    // The newest are kept.
    assert!(get(&d, "/s399").is_some());
}

#[test]
fn close_does_not_wait_for_a_large_write_still_going() {
    let dir = Dir::new("close-large");
    let d = open(&dir, 256 << 20, 1);
    let mut w = d.begin_large(&key("/going"), None).expect("taken");
    assert!(w.push(Bytes::from(vec![1u8; 300_000])));
    let start = std::time::Instant::now();
    d.close();
    assert!(start.elapsed() < Duration::from_secs(5), "closed at once");
    // The write left behind goes nowhere, and nothing of it stays.
    assert!(!w.push(Bytes::from(vec![1u8; 300_000])));
    w.finish(key("/going"), None, object(b"", Vary::None));
    drop(d);
    let d = open(&dir, 256 << 20, 1);
    assert!(get(&d, "/going").is_none());
    assert_eq!(d.stats().used, 0, "{:?}", d.stats());
}

/// A file outside the cache directory that must never change: its path and its bytes.
struct Bystander(PathBuf, Vec<u8>);

impl Bystander {
    fn new(name: &str) -> Bystander {
        let p = std::env::temp_dir().join(format!(
            "rampart-bystander-{name}-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let bytes = b"ssh-ed25519 AAAA-the-real-key root@host\n".repeat(8);
        std::fs::write(&p, &bytes).expect("bystander");
        Bystander(p, bytes)
    }

    fn untouched(&self, what: &str) {
        let now = std::fs::read(&self.0).expect("bystander still there");
        assert_eq!(
            now, self.1,
            "{what}: a file outside the cache directory was changed"
        );
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

/// a link named like a segment made the warm-up cut its target to 0
/// bytes ("a torn record at byte 0"). Links to a file, a directory, a device and a FIFO, and
/// a hard link, named like every kind of file the tier reads: none is followed or written,
/// the tier opens and works, and what it skipped is counted.
#[test]
fn links_named_like_the_tiers_files_are_never_followed() {
    let dir = Dir::new("links");
    let victim = Bystander::new("seg");
    let summary_victim = Bystander::new("idx");
    let big_victim = Bystander::new("big");
    let hard = Bystander::new("hard");
    let log_victim = Bystander::new("log");
    std::fs::create_dir_all(&dir.0).expect("dir");
    let sub = dir.0.join("a-directory");
    std::fs::create_dir(&sub).expect("sub");
    let fifo = std::env::temp_dir().join(format!("rampart-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    mkfifo(&fifo);
    let link = |target: &Path, name: &str| {
        std::os::unix::fs::symlink(target, dir.0.join(name)).expect("symlink");
    };
    link(&victim.0, "00000001.seg");
    link(&summary_victim.0, "00000001.idx");
    link(&big_victim.0, "00000002.big");
    link(&sub, "00000003.seg");
    link(Path::new("/dev/zero"), "00000004.seg");
    link(&fifo, "00000005.seg");
    link(&fifo, "00000006.idx");
    link(&log_victim.0, "purges.log");
    // A FIFO itself (not a link) named like a segment: it must not block the start.
    mkfifo(&dir.0.join("00000007.seg"));
    // A hard link to a file outside: same inode, two links.
    std::fs::hard_link(&hard.0, dir.0.join("00000008.seg")).expect("hard link");

    let d = open(&dir, 64 << 20, 1);
    assert!(d.stats().errors >= 7, "each skipped file is a fault");
    // It works: a record and a large object written and read back.
    d.offer(&key("/a"), None, &object(b"small body", Vary::None));
    d.offer(&key("/big"), None, &object(&vec![7u8; 3 << 20], Vary::None));
    d.purge(&PurgeScope::Exact(key("/gone")), false);
    d.flush();
    assert_eq!(get(&d, "/a").expect("written").body, &b"small body"[..]);
    assert!(d.lookup(&key("/big"), &Fields::new(), plain).is_some());
    d.close();
    drop(d);
    // And again, from what it wrote (the links still there).
    let d = open(&dir, 64 << 20, 1);
    assert_eq!(
        get(&d, "/a").expect("after a restart").body,
        &b"small body"[..]
    );
    d.close();
    for (v, what) in [
        (&victim, "a link named like a segment"),
        (&summary_victim, "a link named like a summary"),
        (&big_victim, "a link named like a large object"),
        (&hard, "a hard link named like a segment"),
        (&log_victim, "a link named like the purge log"),
    ] {
        v.untouched(what);
    }
    assert!(std::fs::symlink_metadata(dir.0.join("00000001.seg"))
        .expect("left alone")
        .file_type()
        .is_symlink());
    let _ = std::fs::remove_file(&fifo);
}

/// a link named like a large object's temporary file, planted while
/// the tier runs, had the next large body written through it. Links named like every
/// temporary file the tier makes (large objects, summaries, the purge log), for the next
/// hundred ids: nothing is written through them.
#[test]
fn links_planted_as_temporary_files_are_not_written_through() {
    let dir = Dir::new("tmp-links");
    // Segments of 256 KiB (the smallest): a few records seal one and write its summary.
    let d = open(&dir, 8 << 20, 1);
    let victim = Bystander::new("tmp");
    for id in 0..100u32 {
        for ext in ["big.tmp", "idx.tmp"] {
            let _ = std::os::unix::fs::symlink(&victim.0, dir.0.join(segment_name(id, ext)));
        }
    }
    let _ = std::os::unix::fs::symlink(&victim.0, dir.0.join("purges.log.tmp"));
    for i in 0..12 {
        d.offer(
            &key(&format!("/o{i}")),
            None,
            &object(&body_of(i, 60 << 10), Vary::None),
        );
    }
    d.offer(
        &key("/large"),
        None,
        &object(&vec![1u8; 1 << 20], Vary::None),
    );
    d.purge(&PurgeScope::Everything, true);
    d.flush();
    assert!(d.lookup(&key("/large"), &Fields::new(), plain).is_some());
    assert!(d.stats().writes >= 12, "{:?}", d.stats());
    d.close();
    drop(d);
    victim.untouched("links planted as temporary files");
}

/// Links swapped in and out under the names the tier is about to use, while it writes and
/// reads: whatever the timing, nothing outside the directory is written.
#[test]
fn links_swapped_in_while_the_tier_writes_change_nothing_outside() {
    let dir = Dir::new("swap");
    let d = open(&dir, 16 << 20, 1);
    let victim = Bystander::new("swap");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = std::thread::spawn({
        let (stop, dir, target) = (stop.clone(), dir.0.clone(), victim.0.clone());
        move || {
            while !stop.load(Ordering::Relaxed) {
                for id in 0..40u32 {
                    for ext in ["big.tmp", "idx.tmp", "seg", "big"] {
                        let p = dir.join(segment_name(id, ext));
                        if std::os::unix::fs::symlink(&target, &p).is_ok() {
                            let _ = std::fs::remove_file(&p);
                        }
                    }
                }
            }
        }
    });
    for i in 0..40 {
        let len = if i % 5 == 0 { 1 << 20 } else { 50 << 10 };
        d.offer(
            &key(&format!("/s{i}")),
            None,
            &object(&body_of(i, len), Vary::None),
        );
        if i % 8 == 0 {
            d.flush();
        }
    }
    d.flush();
    stop.store(true, Ordering::Relaxed);
    swapper.join().expect("swapper");
    d.close();
    drop(d);
    victim.untouched("links swapped in while writing");
    let d = open(&dir, 16 << 20, 1);
    d.close();
    victim.untouched("links swapped in, then a restart");
}

/// a directory others can write (even with the sticky bit, as
/// `/tmp`) or that another user owns is refused at open, saying how to fix it.
#[test]
fn a_directory_others_can_write_or_own_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("mode");
    std::fs::create_dir_all(&dir.0).expect("dir");
    for mode in [0o1777, 0o777, 0o770, 0o720] {
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let e = DiskStore::open(dir.options(64 << 20, 1)).expect_err("refused");
        let msg = e.to_string();
        assert!(
            msg.contains("can be written by other users") && msg.contains("chmod 700"),
            "mode {mode:o}: {msg}"
        );
        assert!(dir::trust(&dir.0).is_err(), "check refuses it too");
    }
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    assert!(dir::trust(&dir.0).is_ok());
    // A parent others can write (without the sticky bit) is refused too.
    let inner = dir.0.join("inner");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let e = DiskStore::open(dir.options(64 << 20, 1).with_dir(&inner)).expect_err("parent");
    assert!(e.to_string().contains("a parent of the disk cache"), "{e}");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let d = DiskStore::open(dir.options(64 << 20, 1).with_dir(&inner)).expect("sticky parent");
    d.close();
    // Another user's directory: only root can make one to try.
    if rustix::process::geteuid().is_root() {
        let theirs = dir.0.join("theirs");
        std::fs::create_dir(&theirs).expect("dir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let e = DiskStore::open(dir.options(64 << 20, 1).with_dir(&theirs)).expect_err("owner");
        assert!(e.to_string().contains("belongs to user id 65534"), "{e}");
    }
}

/// one flipped byte in a large object's file was served as a 200 with
/// its full length, then cut, every time. Bad in its first chunk: a miss (checked before a
/// head could be sent). Bad later: the read that finds it fails (the response is cut), and the
/// object is dropped, so the next lookup is a miss and the origin is asked again. Counted.
#[test]
fn a_corrupt_large_object_is_a_miss_or_cut_once_then_dropped() {
    let dir = Dir::new("corrupt-large");
    // 64 MiB: segments of 2 MiB, so a 3 MiB body gets a file of its own.
    let d = open(&dir, 64 << 20, 1);
    let body = body_of(5, 3 * (1 << 20) + 77);
    let flip = |path: &Path, at: u64| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open");
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).expect("read");
        f.write_all_at(&[b[0] ^ 0x40], at).expect("write");
    };
    let big = |d: &DiskStore| {
        let _ = d;
        ids_in(&dir.0)
            .expect("ls")
            .into_iter()
            .find(|(_, large)| *large)
            .map(|(id, _)| segment_path(&dir.0, id, "big"))
    };

    // A byte of the first chunk.
    write_large(&d, "/first", &body);
    d.flush();
    let path = big(&d).expect("a large file");
    flip(&path, 10);
    assert!(
        d.lookup(&key("/first"), &Fields::new(), plain).is_none(),
        "bad from its first chunk: a miss"
    );
    assert_eq!(d.stats().corrupt, 1);
    assert!(!path.exists(), "dropped");
    assert!(d.lookup(&key("/first"), &Fields::new(), plain).is_none());

    // A byte of the third chunk.
    write_large(&d, "/later", &body);
    d.flush();
    let path = big(&d).expect("a large file");
    flip(&path, 2 * large::CHUNK + 5);
    let f = d
        .lookup(&key("/later"), &Fields::new(), plain)
        .expect("the first chunk is whole: a hit");
    let e = f.object.extent.clone().expect("an extent");
    assert!(e.read(0, 100).is_ok());
    assert!(e.read(large::CHUNK, 100).is_ok());
    assert!(e.read(2 * large::CHUNK, 100).is_err(), "the bad chunk");
    assert_eq!(d.stats().corrupt, 2);
    assert!(
        d.lookup(&key("/later"), &Fields::new(), plain).is_none(),
        "dropped once found bad: the next request is a miss"
    );
    assert!(!path.exists());
    let used = d.stats().used;
    d.close();
    drop(d);
    let d = open(&dir, 64 << 20, 1);
    assert!(d.lookup(&key("/later"), &Fields::new(), plain).is_none());
    assert!(d.stats().used <= used, "{:?}", d.stats());
}
