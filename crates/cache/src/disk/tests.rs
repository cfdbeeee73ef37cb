use super::*;
use crate::cache_control::ResponseDirectives;
use crate::object::fields;
use http::StatusCode;
use std::sync::atomic::AtomicBool;

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
    let mut headers = HeaderMap::new();
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

fn key(url: &str) -> CacheKey {
    CacheKey::new("example.com", url, false)
}

fn plain(b: Vec<u8>) -> (Bytes, Option<Arc<Residency>>) {
    (Bytes::from(b), None)
}

fn get(d: &DiskStore, url: &str) -> Option<Object> {
    d.lookup(&key(url), &HeaderMap::new(), plain)
        .map(|f| f.object)
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
    let ids = list_segments(&dir.0).expect("list");
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
    let ids = list_segments(&dir.0).expect("list");
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
        assert!(d.lookup(&other, &HeaderMap::new(), plain).is_some());
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
    let mut h = HeaderMap::new();
    h.insert(
        http::header::VARY,
        HeaderValue::from_static("accept-language"),
    );
    let vary = Vary::parse(&h);
    let req = |lang: &'static str| {
        let mut r = HeaderMap::new();
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
        .lookup(&key("/big"), &HeaderMap::new(), plain)
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
        .lookup(&key("/big"), &HeaderMap::new(), plain)
        .expect("after restart");
    let e = f.object.extent.clone().expect("an extent");
    assert_eq!(read_all(&e).expect("reads"), body);
    // A byte altered behind rampart's back: that chunk is refused, never sent.
    let path = segment_path(&dir.0, list_segments(&dir.0).expect("ls")[0].0, "big");
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
    assert!(d.lookup(&key("/big"), &HeaderMap::new(), plain).is_none());
    d.close();
    drop(d);
    let d = open(&dir, 1 << 30, 1);
    assert!(d.lookup(&key("/big"), &HeaderMap::new(), plain).is_none());
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
    assert!(d.lookup(&key("/cut"), &HeaderMap::new(), plain).is_none());
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
    assert!(d.lookup(&key("/short"), &HeaderMap::new(), plain).is_some());
}

#[test]
fn an_object_too_large_for_a_segment_gets_its_own_file() {
    let dir = Dir::new("large-mem");
    let d = open(&dir, 16 << 20, 1);
    // Segments of 512 KiB here: a 700 KB body is a large object.
    let body = body_of(9, 700_000);
    d.offer(&key("/m"), None, &object(&body, Vary::None));
    d.flush();
    let f = d.lookup(&key("/m"), &HeaderMap::new(), plain).expect("hit");
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
