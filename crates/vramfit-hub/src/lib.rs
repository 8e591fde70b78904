//! Finding a model's `config.json` on disk: the one crate besides the binary that reads files.
//!
//! A Hub id (`meta-llama/Llama-3.1-8B`, optionally `@revision`) is resolved in the local
//! Hugging Face cache exactly as `huggingface_hub` lays it out:
//!
//! ```text
//! $HF_HUB_CACHE (or $HF_HOME/hub, or $XDG_CACHE_HOME/huggingface/hub, or ~/.cache/huggingface/hub)
//! └── models--meta-llama--Llama-3.1-8B/
//!     ├── refs/main                      (a commit hash)
//!     └── snapshots/<commit>/config.json
//! ```
//!
//! Only `config.json` is ever read — never weights, never code. When the cache lacks it,
//! [`download_config`] fetches that one file from the Hub into the cache (honouring `HF_TOKEN`,
//! `HF_ENDPOINT` and `HF_HUB_OFFLINE`).

mod download;

pub use download::{HubRemote, download_config};

use std::fs;
use std::path::{Path, PathBuf};

/// The environment variables that decide where the cache is. Read by the binary, passed in, so
/// tests never depend on the real environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubEnv {
    /// `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`).
    pub hf_hub_cache: Option<PathBuf>,
    /// `HF_HOME`.
    pub hf_home: Option<PathBuf>,
    /// `XDG_CACHE_HOME`.
    pub xdg_cache_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
}

impl HubEnv {
    /// Reads the variables from the process environment (empty values count as unset).
    pub fn from_process() -> HubEnv {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        HubEnv {
            hf_hub_cache: var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")),
            hf_home: var("HF_HOME"),
            xdg_cache_home: var("XDG_CACHE_HOME"),
            home: var("HOME"),
        }
    }

    /// The hub cache directory, following `huggingface_hub`'s precedence.
    pub fn cache_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = &self.hf_hub_cache {
            return Some(dir.clone());
        }
        if let Some(home) = &self.hf_home {
            return Some(home.join("hub"));
        }
        if let Some(xdg) = &self.xdg_cache_home {
            return Some(xdg.join("huggingface").join("hub"));
        }
        self.home.as_ref().map(|h| h.join(".cache").join("huggingface").join("hub"))
    }
}

/// A Hub repository id with an optional revision (`org/name@rev`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoId {
    /// `org`.
    pub org: String,
    /// `name`.
    pub name: String,
    /// A branch, tag or commit; `main` by default.
    pub revision: String,
}

impl RepoId {
    /// Parses `org/name` or `org/name@revision`. Returns `None` for anything else (a bare
    /// name, a path with more slashes, characters the Hub does not allow).
    pub fn parse(text: &str) -> Option<RepoId> {
        let (id, revision) = match text.split_once('@') {
            Some((id, rev)) if !rev.is_empty() && valid_segment(rev) => (id, rev.to_string()),
            Some(_) => return None,
            None => (text, "main".to_string()),
        };
        let (org, name) = id.split_once('/')?;
        if !valid_segment(org) || !valid_segment(name) || name.contains('/') {
            return None;
        }
        Some(RepoId { org: org.to_string(), name: name.to_string(), revision })
    }

    /// The cache folder name: `models--org--name`.
    pub fn cache_folder(&self) -> String {
        format!("models--{}--{}", self.org, self.name)
    }
}

pub(crate) fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Why a Hub id could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// No cache directory could be determined (no `HOME` and no `HF_*` variable).
    #[error("cannot locate the Hugging Face cache (HF_HUB_CACHE, HF_HOME and HOME are unset)")]
    NoCacheDir,
    /// The repository is not in the cache.
    #[error("model '{repo}' is not in the local Hugging Face cache ({cache})")]
    NotCached {
        /// `org/name`.
        repo: String,
        /// The cache directory searched.
        cache: String,
    },
    /// `HF_HUB_OFFLINE` forbids fetching what the cache lacks.
    #[error("model '{repo}' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set")]
    Offline {
        /// `org/name`.
        repo: String,
    },
    /// The Hub answered 401/403.
    #[error("the Hub refused access to '{repo}' (gated or private)")]
    Gated {
        /// `org/name`.
        repo: String,
    },
    /// The Hub has no such repository, revision or file.
    #[error("the Hub has no config.json for '{repo}' at revision '{revision}'")]
    NotOnHub {
        /// `org/name`.
        repo: String,
        /// The revision asked for.
        revision: String,
    },
    /// The request failed.
    #[error("could not fetch config.json of '{repo}': {message}")]
    Network {
        /// `org/name`.
        repo: String,
        /// What went wrong.
        message: String,
    },
    /// The cache could not be written.
    #[error("could not write to the Hugging Face cache at {path}: {message}")]
    Write {
        /// The folder.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The repository is cached but the revision or its `config.json` is not.
    #[error("model '{repo}' is cached but has no config.json for revision '{revision}'")]
    NoConfig {
        /// `org/name`.
        repo: String,
        /// The revision asked for.
        revision: String,
    },
}

impl HubError {
    /// A one-line hint for the user.
    pub fn hint(&self) -> String {
        match self {
            HubError::NoCacheDir => {
                "set HF_HOME or HF_HUB_CACHE, or pass --model path/to/config.json".into()
            }
            HubError::NotCached { repo, .. } | HubError::NoConfig { repo, .. } | HubError::Offline { repo } => format!(
                "fetch only the config with `huggingface-cli download {repo} config.json` (unset HF_HUB_OFFLINE to let vramfit fetch it), or pass --model path/to/config.json"
            ),
            HubError::Gated { repo } => format!("accept the licence on the model page of {repo} and set HF_TOKEN to a token with read access"),
            HubError::NotOnHub { .. } => "check the spelling of ORG/NAME and the revision, or pass --model path/to/config.json".into(),
            HubError::Network { .. } => "check the connection (or HF_ENDPOINT), or set HF_HUB_OFFLINE=1 and pass --model path/to/config.json".into(),
            HubError::Write { .. } => "set HF_HUB_CACHE to a writable folder".into(),
        }
    }
}

/// Finds `config.json` for `repo` in the cache: `refs/<revision>` names the snapshot; a
/// revision that is itself a snapshot folder (a commit hash) is used directly.
pub fn find_cached_config(repo: &RepoId, env: &HubEnv) -> Result<PathBuf, HubError> {
    let cache = env.cache_dir().ok_or(HubError::NoCacheDir)?;
    let root = cache.join(repo.cache_folder());
    let repo_name = format!("{}/{}", repo.org, repo.name);
    if !root.is_dir() {
        return Err(HubError::NotCached { repo: repo_name, cache: cache.display().to_string() });
    }
    let snapshots = root.join("snapshots");
    let commit = fs::read_to_string(root.join("refs").join(&repo.revision))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| valid_segment(s));
    let candidates: Vec<PathBuf> = match commit {
        Some(commit) => vec![snapshots.join(commit)],
        None if snapshots.join(&repo.revision).is_dir() => vec![snapshots.join(&repo.revision)],
        // No ref file (a cache copied by hand): fall back to the newest snapshot, only for main.
        None if repo.revision == "main" => newest_first(&snapshots),
        None => Vec::new(),
    };
    candidates
        .into_iter()
        .map(|dir| dir.join("config.json"))
        .find(|p| p.is_file())
        .ok_or(HubError::NoConfig { repo: repo_name, revision: repo.revision.clone() })
}

fn newest_first(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let modified = e.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
            (modified, e.path())
        })
        .collect();
    dirs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    dirs.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with_cache(dir: &Path) -> HubEnv {
        HubEnv { hf_hub_cache: Some(dir.to_path_buf()), ..HubEnv::default() }
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn parses_repo_ids() {
        let id = RepoId::parse("meta-llama/Llama-3.1-8B").unwrap();
        assert_eq!(
            (id.org.as_str(), id.name.as_str(), id.revision.as_str()),
            ("meta-llama", "Llama-3.1-8B", "main")
        );
        assert_eq!(RepoId::parse("gpt2/x@v1.0").unwrap().revision, "v1.0");
        for bad in ["gpt2", "a/b/c", "../x", "a/..", "a/b@", "/x", "a b/c", "a/b@../../etc"] {
            assert_eq!(RepoId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn cache_dir_precedence_matches_huggingface_hub() {
        let mut env = HubEnv { home: Some("/home/u".into()), ..HubEnv::default() };
        assert_eq!(env.cache_dir(), Some(PathBuf::from("/home/u/.cache/huggingface/hub")));
        env.xdg_cache_home = Some("/xdg".into());
        assert_eq!(env.cache_dir(), Some(PathBuf::from("/xdg/huggingface/hub")));
        env.hf_home = Some("/hf".into());
        assert_eq!(env.cache_dir(), Some(PathBuf::from("/hf/hub")));
        env.hf_hub_cache = Some("/cache".into());
        assert_eq!(env.cache_dir(), Some(PathBuf::from("/cache")));
        assert_eq!(HubEnv::default().cache_dir(), None);
    }

    #[test]
    fn follows_refs_to_the_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("models--org--m");
        write(&root.join("refs/main"), "abc123\n");
        write(&root.join("snapshots/abc123/config.json"), "{}");
        write(&root.join("snapshots/old999/config.json"), "{\"old\":1}");
        let found =
            find_cached_config(&RepoId::parse("org/m").unwrap(), &env_with_cache(tmp.path()))
                .unwrap();
        assert_eq!(found, root.join("snapshots/abc123/config.json"));
        // A commit hash as the revision.
        let found = find_cached_config(
            &RepoId::parse("org/m@old999").unwrap(),
            &env_with_cache(tmp.path()),
        )
        .unwrap();
        assert_eq!(found, root.join("snapshots/old999/config.json"));
    }

    #[test]
    fn missing_repo_and_missing_config_are_distinct_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let env = env_with_cache(tmp.path());
        let err = find_cached_config(&RepoId::parse("org/absent").unwrap(), &env).unwrap_err();
        assert!(matches!(err, HubError::NotCached { .. }));
        assert!(err.hint().contains("huggingface-cli download org/absent config.json"));
        write(&tmp.path().join("models--org--weights-only/snapshots/abc/model.safetensors"), "");
        let err =
            find_cached_config(&RepoId::parse("org/weights-only").unwrap(), &env).unwrap_err();
        assert!(matches!(err, HubError::NoConfig { .. }), "{err}");
    }
}
