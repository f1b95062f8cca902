//! "Did you mean …?" suggestions for unknown names (tables, columns, functions, formats).

/// Up to `limit` candidates that look like `name`, best first. Comparison ignores case, so a
/// wrong-case spelling always finds its target.
pub fn closest(name: &str, candidates: &[String], limit: usize) -> Vec<String> {
    let needle = name.to_lowercase();
    let mut scored: Vec<(f64, &String)> = candidates
        .iter()
        .filter_map(|candidate| {
            let lower = candidate.to_lowercase();
            let score = if lower == needle {
                2.0
            } else if !needle.is_empty() && (lower.contains(&needle) || needle.contains(&lower)) {
                1.0 + strsim::jaro_winkler(&needle, &lower) / 10.0
            } else {
                strsim::jaro_winkler(&needle, &lower)
            };
            (score >= 0.82).then_some((score, candidate))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let mut out: Vec<String> = Vec::new();
    for (_, candidate) in scored {
        if !out.contains(candidate) {
            out.push(candidate.clone());
        }
        if out.len() == limit {
            break;
        }
    }
    out
}

/// `"a", "b" or "c"`.
pub fn quote_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    match quoted.len() {
        0 => String::new(),
        1 => quoted[0].clone(),
        n => format!("{} or {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_and_case_different_names() {
        let candidates: Vec<String> = ["UserID", "URL", "Referer", "SearchPhrase"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(closest("userid", &candidates, 3)[0], "UserID");
        assert_eq!(closest("SearchPhrse", &candidates, 3), vec!["SearchPhrase"]);
        assert!(closest("zzzz", &candidates, 3).is_empty());
    }

    #[test]
    fn quotes_lists() {
        let names = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(quote_list(&names), "\"a\", \"b\" or \"c\"");
    }
}
