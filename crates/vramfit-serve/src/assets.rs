//! The page, compiled into the binary: it works offline and loads nothing from elsewhere.

/// The content type and text of the file at `path`, if it is one of the page's.
pub fn file(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" | "/index.html" => {
            Some(("text/html; charset=utf-8", include_str!("assets/index.html")))
        }
        "/app.js" => Some(("text/javascript; charset=utf-8", include_str!("assets/app.js"))),
        "/style.css" => Some(("text/css; charset=utf-8", include_str!("assets/style.css"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::file;

    /// Nothing on the page may come from another origin: no CDN, font or image URL.
    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for path in ["/", "/app.js", "/style.css"] {
            let (_, text) = file(path).unwrap();
            for needle in ["http://", "https://", "//cdn", "@import", "url("] {
                assert!(!text.contains(needle), "{path} contains {needle}");
            }
        }
    }
}
