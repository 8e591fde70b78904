//! Fetching `config.json` alone from the Hub into the local cache, when the cache lacks it.
//!
//! One HTTPS GET of `{HF_ENDPOINT}/{org}/{name}/resolve/{revision}/config.json`, with
//! `Authorization: Bearer $HF_TOKEN` for gated repositories, capped at 4 MiB. The file lands
//! where `huggingface_hub` would put it (`refs/<revision>` → `snapshots/<commit>/config.json`),
//! so the next run, and Python, find it offline. Never weights, never code. `HF_HUB_OFFLINE`
//! turns this off.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::{HubEnv, HubError, RepoId, valid_segment};

/// Where and how to reach the Hub. Read by the binary from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRemote {
    /// `HF_ENDPOINT`, default `https://huggingface.co`.
    pub endpoint: String,
    /// `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`).
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE` set to a true value.
    pub offline: bool,
}

impl Default for HubRemote {
    fn default() -> Self {
        HubRemote { endpoint: "https://huggingface.co".into(), token: None, offline: false }
    }
}

impl HubRemote {
    /// Reads `HF_ENDPOINT`, `HF_TOKEN` and `HF_HUB_OFFLINE` from the process environment.
    pub fn from_process() -> HubRemote {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        HubRemote {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| HubRemote::default().endpoint),
            token: var("HF_TOKEN").or_else(|| var("HUGGING_FACE_HUB_TOKEN")),
            offline,
        }
    }
}

/// The most a downloaded `config.json` may weigh: the limit `vramfit-core`'s parser
/// (`hf_config::MAX_CONFIG_BYTES`) enforces, so nothing larger is fetched only to be refused.
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Downloads `config.json` of `repo` into the cache and returns its path.
pub fn download_config(
    repo: &RepoId,
    env: &HubEnv,
    remote: &HubRemote,
) -> Result<PathBuf, HubError> {
    let repo_name = format!("{}/{}", repo.org, repo.name);
    if remote.offline {
        return Err(HubError::Offline { repo: repo_name });
    }
    let cache = env.cache_dir().ok_or(HubError::NoCacheDir)?;
    let url = format!(
        "{}/{}/{}/resolve/{}/config.json",
        remote.endpoint.trim_end_matches('/'),
        repo.org,
        repo.name,
        repo.revision
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut request =
        agent.get(&url).header("User-Agent", concat!("vramfit/", env!("CARGO_PKG_VERSION")));
    if let Some(token) = &remote.token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let network =
        |e: ureq::Error| HubError::Network { repo: repo_name.clone(), message: e.to_string() };
    let mut response = request.call().map_err(network)?;
    match response.status().as_u16() {
        200 => {}
        401 | 403 => return Err(HubError::Gated { repo: repo_name }),
        404 => return Err(HubError::NotOnHub { repo: repo_name, revision: repo.revision.clone() }),
        code => {
            return Err(HubError::Network {
                repo: repo_name,
                message: format!("HTTP status {code}"),
            });
        }
    }
    let commit = response
        .headers()
        .get("x-repo-commit")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .filter(|c| valid_segment(c))
        .unwrap_or_else(|| repo.revision.clone());
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_CONFIG_BYTES)
        .read_to_string()
        .map_err(network)?;
    let root = cache.join(repo.cache_folder());
    let snapshot = root.join("snapshots").join(&commit);
    let write = |e: std::io::Error| HubError::Write {
        path: root.display().to_string(),
        message: e.to_string(),
    };
    fs::create_dir_all(&snapshot).map_err(write)?;
    let path = snapshot.join("config.json");
    fs::write(&path, body).map_err(write)?;
    if commit != repo.revision {
        fs::create_dir_all(root.join("refs")).map_err(write)?;
        fs::write(root.join("refs").join(&repo.revision), &commit).map_err(write)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    /// A one-shot HTTP server on loopback; returns its address and the request it saw.
    fn serve_once(
        status: &str,
        headers: &str,
        body: &str,
    ) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let response = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let handle = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                request.push_str(&line);
            }
            stream.write_all(response.as_bytes()).unwrap();
            request
        });
        (addr, handle)
    }

    #[test]
    fn downloads_into_the_cache_layout_with_the_token() {
        let tmp = tempfile::tempdir().unwrap();
        let env = HubEnv { hf_hub_cache: Some(tmp.path().to_path_buf()), ..HubEnv::default() };
        let (endpoint, server) =
            serve_once("200 OK", "X-Repo-Commit: 5f2a9c\r\n", "{\"model_type\":\"gpt2\"}");
        let remote = HubRemote { endpoint, token: Some("hf_secret".into()), offline: false };
        let repo = RepoId::parse("org/model").unwrap();
        let path = download_config(&repo, &env, &remote).unwrap();
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /org/model/resolve/main/config.json "), "{request}");
        assert!(
            request.to_ascii_lowercase().contains("authorization: bearer hf_secret"),
            "{request}"
        );
        assert_eq!(path, tmp.path().join("models--org--model/snapshots/5f2a9c/config.json"));
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"model_type\":\"gpt2\"}");
        // The next lookup finds it offline.
        assert_eq!(crate::find_cached_config(&repo, &env).unwrap(), path);
    }

    #[test]
    fn gated_and_missing_repositories_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let env = HubEnv { hf_hub_cache: Some(tmp.path().to_path_buf()), ..HubEnv::default() };
        let repo = RepoId::parse("meta-llama/Llama-3.1-8B").unwrap();
        let (endpoint, server) = serve_once("401 Unauthorized", "", "");
        let err = download_config(&repo, &env, &HubRemote { endpoint, ..HubRemote::default() })
            .unwrap_err();
        server.join().unwrap();
        assert!(matches!(err, HubError::Gated { .. }), "{err}");
        assert!(err.hint().contains("HF_TOKEN"));
        let (endpoint, server) = serve_once("404 Not Found", "", "");
        let err = download_config(&repo, &env, &HubRemote { endpoint, ..HubRemote::default() })
            .unwrap_err();
        server.join().unwrap();
        assert!(matches!(err, HubError::NotOnHub { .. }), "{err}");
    }

    #[test]
    fn offline_never_connects() {
        let env = HubEnv { hf_hub_cache: Some("/nonexistent".into()), ..HubEnv::default() };
        let remote =
            HubRemote { endpoint: "http://127.0.0.1:9".into(), token: None, offline: true };
        let err = download_config(&RepoId::parse("a/b").unwrap(), &env, &remote).unwrap_err();
        assert!(matches!(err, HubError::Offline { .. }));
    }
}
