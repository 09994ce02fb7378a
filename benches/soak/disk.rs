//! What the soak's load costs the disk, per store: the bytes the runtime process
//! wrote over all its starts (`/proc/<pid>/io` `write_bytes`, read before each kill and
//! at the end), the database's size at the end, and for SQLite the WAL file's size,
//! polled every [`WAL_POLL`] for its largest; for PostgreSQL the server's WAL bytes
//! over the run (`pg_stat_wal.wal_bytes`, the whole cluster's: other databases' work
//! on the same server counts too) and the run's schema's relations at the end.
//!
//! "Bytes written per delivery" is the runtime's `write_bytes` (plus, on PostgreSQL,
//! the server's WAL bytes, which stand for what the server writes per commit) over
//! the webhooks accepted and delivered: what a user's disk takes per webhook,
//! checkpoints, log lines and everything else included, as the issue measured it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the SQLite WAL's size is read.
const WAL_POLL: Duration = Duration::from_millis(250);

/// The disk figures of one run.
#[derive(Default)]
pub struct Disk {
    /// Bytes the runtime process wrote to storage, all starts.
    pub runtime_written: u64,
    /// PostgreSQL: the server's WAL bytes over the run (whole cluster).
    pub server_wal: Option<u64>,
    /// The database at the end: SQLite's file (WAL apart), or the schema's relations.
    pub db_bytes: Option<u64>,
    /// SQLite: the WAL file at the end, and the largest seen.
    pub wal_end: Option<u64>,
    pub wal_max: Option<u64>,
}

/// Polls a SQLite WAL file's size until dropped, keeping the largest.
pub struct WalWatch {
    largest: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl WalWatch {
    pub fn start(wal: PathBuf) -> WalWatch {
        let largest = Arc::new(AtomicU64::new(0));
        let l = largest.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(m) = std::fs::metadata(&wal) {
                    l.fetch_max(m.len(), Ordering::Relaxed);
                }
                tokio::time::sleep(WAL_POLL).await;
            }
        });
        WalWatch { largest, task }
    }

    pub fn largest(&self) -> u64 {
        self.largest.load(Ordering::Relaxed)
    }
}

impl Drop for WalWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A file's size, if it exists.
pub fn file_len(path: &std::path::Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

async fn pg_client(base: &str) -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// `pg_stat_wal.wal_bytes` of the server at `base` (PostgreSQL 14+).
pub async fn pg_wal_bytes(base: &str) -> Option<u64> {
    let client = pg_client(base).await?;
    let row = client
        .query_one("SELECT wal_bytes::bigint FROM pg_stat_wal", &[])
        .await
        .ok()?;
    Some(row.get::<_, i64>(0) as u64)
}

/// The total size (heap, indexes, TOAST) of the relations in `schema`.
pub async fn pg_schema_bytes(base: &str, schema: &str) -> Option<u64> {
    let client = pg_client(base).await?;
    let row = client
        .query_one(
            "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')",
            &[&schema],
        )
        .await
        .ok()?;
    Some(row.get::<_, i64>(0) as u64)
}

fn kib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1024.0)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("-".to_owned(), |b| {
        format!("{:.1}", b as f64 / (1024.0 * 1024.0))
    })
}

/// Prints the disk table for `deliveries` webhooks delivered over `secs` seconds.
pub fn print(disk: &Disk, deliveries: usize, secs: f64) {
    let n = deliveries.max(1) as u64;
    println!("| disk | value |");
    println!("|---|---:|");
    println!(
        "| runtime bytes written, all starts (MiB) | {} |",
        mib(Some(disk.runtime_written))
    );
    println!(
        "| runtime write rate (MB/s over the run) | {:.2} |",
        disk.runtime_written as f64 / 1e6 / secs.max(1.0)
    );
    println!(
        "| **runtime KiB written per delivery** | **{}** |",
        kib(disk.runtime_written / n)
    );
    if let Some(wal) = disk.server_wal {
        println!(
            "| PostgreSQL WAL bytes over the run, whole server (MiB) | {} |",
            mib(Some(wal))
        );
        println!(
            "| **PostgreSQL WAL KiB per delivery** | **{}** |",
            kib(wal / n)
        );
    }
    println!("| database at the end (MiB) | {} |", mib(disk.db_bytes));
    if let Some(db) = disk.db_bytes {
        println!("| database KiB per delivery | {} |", kib(db / n));
    }
    if disk.wal_end.is_some() || disk.wal_max.is_some() {
        println!("| WAL file at the end (MiB) | {} |", mib(disk.wal_end));
        println!("| WAL file, largest seen (MiB) | {} |", mib(disk.wal_max));
    }
    println!();
}
