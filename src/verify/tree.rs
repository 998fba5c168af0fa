//! Tree-level checks: entry modes, malformed trees, the roots, and names that a
//! case-insensitive file system folds into one.

use super::*;

/// The name two sibling entries share on a case-insensitive, normalization-insensitive file
/// system: NFC of the Unicode default (full) case folding of the name's NFD (the canonical
/// caseless match of the Unicode standard, section 3.13). Full folding, not lowercasing: `ß`,
/// `ẞ` and `ss` fold alike, and so do `ſ` and `s`, `ﬁ` and `fi`, which `to_lowercase` keeps
/// apart. An ASCII name folds to its ASCII lowercase.
pub(super) fn fold_key(name: &str) -> std::borrow::Cow<'_, str> {
    use caseless::Caseless;
    use unicode_normalization::UnicodeNormalization;
    if name.is_ascii() {
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            name.to_ascii_lowercase().into()
        } else {
            name.into()
        }
    } else {
        name.nfd()
            .default_case_fold()
            .nfc()
            .collect::<String>()
            .into()
    }
}

/// The [`Rule::CaseCollision`] warnings among the entries named `names` of the directory
/// `dir` (`""` or ending in `/`): each pair whose fold keys are equal, once, named by the
/// first path in byte order; `only`, when given, keeps the pairs with a member it accepts.
pub(super) fn collisions(
    dir: &str,
    names: &[&str],
    only: Option<&dyn Fn(&str) -> bool>,
) -> Vec<Finding> {
    let mut keyed: Vec<(std::borrow::Cow<'_, str>, &str)> =
        names.iter().map(|n| (fold_key(n), *n)).collect();
    keyed.sort_unstable();
    let mut out = Vec::new();
    for run in keyed.chunk_by(|a, b| a.0 == b.0) {
        for (i, (_, a)) in run.iter().enumerate() {
            for (_, b) in &run[i + 1..] {
                if only.is_some_and(|keep| !keep(a) && !keep(b)) {
                    continue;
                }
                let (first, second) = if a <= b { (a, b) } else { (b, a) };
                out.push(Finding {
                    path: format!("{dir}{first}"),
                    rule: Rule::CaseCollision,
                    detail: format!(
                        "warning: {dir}{second} is the same name on a case-insensitive file system (equal after Unicode case folding and NFC normalization): a checkout on macOS or Windows holds only one of them; the ledger keeps both as published"
                    ),
                });
            }
        }
    }
    out
}

/// Collects [`Rule::CaseCollision`] warnings during a tree walk, one directory at a time (the
/// walk visits the entries of a directory together). Holds one directory's names in one
/// buffer, and folds them only when one of them is not plain lowercase ASCII.
#[derive(Default)]
pub(super) struct Siblings {
    pub(super) dir: String,
    pub(super) names: String,
    pub(super) ends: Vec<usize>,
    pub(super) plain: bool,
    pub(super) warnings: Vec<Finding>,
}

impl Siblings {
    pub(super) fn visit(&mut self, entry: &store::Walked<'_>) {
        let dir = &entry.path[..entry.path.len() - entry.name.len()];
        if dir != self.dir || self.ends.is_empty() {
            self.flush();
            self.dir.clear();
            self.dir.push_str(dir);
        }
        self.plain &= entry
            .name
            .bytes()
            .all(|b| b.is_ascii() && !b.is_ascii_uppercase());
        self.names.push_str(entry.name);
        self.ends.push(self.names.len());
    }

    pub(super) fn flush(&mut self) {
        if !self.plain {
            let mut names = Vec::with_capacity(self.ends.len());
            let mut start = 0;
            for &end in &self.ends {
                names.push(&self.names[start..end]);
                start = end;
            }
            self.warnings.extend(collisions(&self.dir, &names, None));
        }
        self.names.clear();
        self.ends.clear();
        self.plain = true;
    }

    pub(super) fn finish(mut self) -> Vec<Finding> {
        self.flush();
        self.warnings
    }
}

/// The [`Rule::CaseCollision`] warnings a push brings: in every directory on the way to an
/// added path (below `ledger/v1/` or `finality/v1/`), the pairs of sibling names at `new` that
/// fold alike and of which at least one is not at `old`.
pub(super) fn added_collisions<'p>(
    old: &Snapshot<'_>,
    new: &Snapshot<'_>,
    added: impl Iterator<Item = &'p str>,
) -> Result<Vec<Finding>, Error> {
    let mut on_the_way: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for path in added {
        let root = if path.starts_with(FINALITY) {
            FINALITY
        } else {
            LEDGER
        };
        let mut at = root.len() + 1;
        while at <= path.len() {
            let end = path[at..].find('/').map_or(path.len(), |i| at + i);
            on_the_way
                .entry(&path[..at])
                .or_default()
                .insert(&path[at..end]);
            at = end + 1;
        }
    }
    let mut warnings = Vec::new();
    for (dir, names) in on_the_way {
        let mut fresh = BTreeSet::new();
        for name in names {
            if old.mode(&format!("{dir}{name}"))?.is_none() {
                fresh.insert(name);
            }
        }
        if fresh.is_empty() {
            continue;
        }
        let siblings = new.entry_names(dir.trim_end_matches('/'))?;
        let siblings: Vec<&str> = siblings.iter().map(String::as_str).collect();
        warnings.extend(collisions(dir, &siblings, Some(&|n| fresh.contains(n))));
    }
    Ok(warnings)
}

/// The [`Rule::EntryMode`] finding for the entry at `path` of `mode`.
pub(super) fn entry_mode_finding(path: &str, mode: store::Mode) -> Finding {
    let root = if path.starts_with("finality") {
        FINALITY
    } else {
        LEDGER
    };
    Finding {
        path: path.to_owned(),
        rule: Rule::EntryMode,
        detail: format!(
            "{} (mode {mode}): only plain files (mode 100644) and directories belong under {root}/; a clone would not check out the bytes verified here",
            mode.describe()
        ),
    }
}

/// The finding for the malformed tree at `path` (its [`store::TreeDefect`]); a mode defect is
/// reported per entry as [`Rule::EntryMode`] instead.
pub(super) fn tree_defect_finding(path: &str, defect: store::TreeDefect) -> Finding {
    use store::TreeDefect;
    let rule = match defect {
        TreeDefect::DuplicateName { .. } => Rule::TreeDuplicateEntry,
        TreeDefect::FileDirectoryConflict { .. } => Rule::TreeFileDirectoryConflict,
        TreeDefect::Unsorted { .. } => Rule::TreeUnsorted,
        TreeDefect::BadName { .. } => Rule::TreeBadName,
        TreeDefect::NotCanonical { .. } => Rule::TreeNotCanonical,
        TreeDefect::Mode { .. } => Rule::EntryMode,
    };
    Finding {
        path: path.to_owned(),
        rule,
        detail: format!(
            "malformed tree: {defect}; git resolves, checks out and lists such a tree inconsistently, and writers refuse to build on it (`git fsck` reports it too)"
        ),
    }
}

/// Malformed trees above the ledger roots: the root tree, `ledger` and `finality` (the trees
/// below `ledger/v1` and `finality/v1` are checked by the walks and the push diff).
pub(super) fn check_upper_trees(snap: &Snapshot<'_>) -> Result<Vec<Finding>, Error> {
    let mut findings = Vec::new();
    for path in ["", "ledger", "finality"] {
        if let Some(defect) = snap.tree_defect_at(path)? {
            findings.push(tree_defect_finding(path, defect));
        }
    }
    Ok(findings)
}

/// Checks the directories on the way to `root` (`ledger`, then `ledger/v1`): each absent or a
/// directory. Returns the findings and whether `root` can be walked (it is a directory).
pub(super) fn check_root(snap: &Snapshot<'_>, root: &str) -> Result<(Vec<Finding>, bool), Error> {
    let mut at = 0;
    loop {
        let end = root[at..].find('/').map_or(root.len(), |i| at + i);
        let path = &root[..end];
        match snap.mode(path)? {
            None => return Ok((Vec::new(), false)),
            Some(mode) if !mode.is_dir() => {
                return Ok((vec![entry_mode_finding(path, mode)], false));
            }
            Some(_) if end == root.len() => return Ok((Vec::new(), true)),
            Some(_) => at = end + 1,
        }
    }
}
