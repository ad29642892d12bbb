//! Tuning records: meta-schedule databases, committed next to the manifest and applied
//! by every build.
//!
//! ```text
//! .relax/tuning/<model>/<cargo target>/database_workload.json
//!                                      database_tuning_record.json
//! ```
//!
//! `cargo relax tune` writes them (meta-schedule, `tune.trials` per task; interrupted
//! runs resume from the records already written), keeping a task's best record only when
//! it runs faster than the task's default schedule (the files may hold no record at all).
//! A build with records for its model and target compiles with them (`static_shape_tuning`
//! with no trials, i.e. apply the database; the functions without a record get default
//! schedules) and never tunes; their hash is part of the model's key.

use std::path::{Path, PathBuf};

/// The files of a tuning-record folder that are applied (and hashed).
pub const RECORD_FILES: [&str; 2] = ["database_workload.json", "database_tuning_record.json"];

/// The records folder of one model for one Cargo target.
pub fn dir(prepared_root: &Path, model: &str, cargo_target: &str) -> PathBuf {
    prepared_root.join("tuning").join(model).join(cargo_target)
}

/// The record files present in `dir` (empty when there are none).
pub fn record_files(dir: &Path) -> Vec<PathBuf> {
    RECORD_FILES
        .iter()
        .map(|file| dir.join(file))
        .filter(|path| path.is_file())
        .collect()
}

/// Whether `dir` holds a complete set of records.
pub fn has_records(dir: &Path) -> bool {
    record_files(dir).len() == RECORD_FILES.len()
}

#[cfg(test)]
mod tests;
