//! Every import points down: the crate's module graph checked against the layer list
//! written in `src/lib.rs` (its "Layers" section, bottom to top).
//!
//! Two rules, over every `crate::` / `super::` / `self::` path and every path that
//! starts with a child module's name, in `use` trees and inline alike:
//!
//! 1. A top-level module imports only modules listed before it in the layer list, and
//!    every top-level module is listed.
//! 2. Inside any module, its children (and the module's own file) never import each
//!    other in a circle: for each module the graph "child A uses something in child B"
//!    is acyclic, at every depth.
//!
//! A parent that re-exports a child's item (`pub use child::Item`) is a facade: those
//! lines are declarations, not dependencies, and a path through the facade
//! (`crate::mux::Item`) counts as a use of the child that defines `Item`. The binary
//! (`src/bin/switchboard/`) is another crate, with no layer list: rule 2 is checked
//! over it on its own.
//!
//! The checker is a plain text scanner (comments, strings and char literals removed,
//! braces counted for inline `mod name { .. }` blocks), not a Rust parser: it needs no
//! dependency, runs in milliseconds, and its own tests below show it catching an
//! upward import and a cycle.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// One use of another module: the file and line it is written on, and the absolute
/// module path of what it names (as deep as the path names modules).
#[derive(Debug, Clone)]
struct Use {
    from: Vec<String>,
    to: Vec<String>,
    file: String,
    line: usize,
}

/// An inline `mod name { .. }`: the byte range of its body and its path below the
/// file's module.
type InlineModule = (usize, usize, Vec<String>);

/// One module's children's import graph: child -> child it uses -> where (file, line).
type Graph = BTreeMap<String, BTreeMap<String, (String, usize)>>;

/// The crate as the checker sees it: module paths, facades' re-exports, uses.
#[derive(Default)]
struct Crate {
    /// Every module path (file modules and inline `mod x { }` blocks); the root is `[]`.
    modules: BTreeSet<Vec<String>>,
    /// Per module, re-exported name -> the absolute path it names.
    reexports: HashMap<Vec<String>, HashMap<String, Vec<String>>>,
    uses: Vec<Use>,
}

/// Removes comments, string literals (plain and raw) and char literals, keeping every
/// newline so that offsets still give line numbers.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let keep_newlines = |s: &[u8], out: &mut String| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            keep_newlines(&rest[..end], &mut out);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            keep_newlines(&rest[..j], &mut out);
            i += j;
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\""))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let start = 2 + hashes;
            let end = rest[start..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| start + p + close.len());
            out.push_str("\"\"");
            keep_newlines(&rest[2..end], &mut out);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            keep_newlines(&rest[1..j.min(rest.len())], &mut out);
            i += (j + 1).min(rest.len());
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                // `i` is always on a character boundary (the scanner copies whole
                // characters), and the quote is one byte, so `i + 1` is one too.
                src[i + 1..]
                    .chars()
                    .next()
                    .map(|c| 1 + c.len_utf8())
                    .filter(|&n| rest.get(n) == Some(&b'\''))
                    .map(|n| n + 1)
            };
            match len {
                Some(n) => {
                    out.push_str("' '");
                    i += n;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            // Copy one whole UTF-8 character.
            let c = src[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn ident_at(b: &[u8], i: usize) -> Option<(String, usize)> {
    if i < b.len() && is_ident_start(b[i]) {
        let end = b[i..]
            .iter()
            .position(|&c| !is_ident(c))
            .map_or(b.len(), |p| i + p);
        Some((String::from_utf8_lossy(&b[i..end]).into_owned(), end))
    } else {
        None
    }
}

/// Parses one use tree at `i` (after `use `), appending each leaf path (with its alias,
/// if any) to `out`; returns the index after the tree.
fn parse_tree(
    b: &[u8],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut segs = prefix.to_vec();
    loop {
        i = skip_ws(b, i);
        if i >= b.len() {
            return i;
        }
        if b[i] == b'{' {
            i += 1;
            loop {
                i = skip_ws(b, i);
                while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
                    i += 1;
                }
                if i >= b.len() {
                    return i;
                }
                if b[i] == b'}' {
                    return i + 1;
                }
                let before = i;
                i = parse_tree(b, i, &segs, out);
                if i == before {
                    return i + 1;
                }
            }
        }
        if b[i] == b'*' {
            segs.push("*".into());
            out.push((segs, None));
            return i + 1;
        }
        let Some((name, end)) = ident_at(b, i) else {
            return i;
        };
        segs.push(name);
        i = skip_ws(b, end);
        if b[i..].starts_with(b"::") {
            i += 2;
            continue;
        }
        let mut alias = None;
        if b[i..].starts_with(b"as") && !b.get(i + 2).is_some_and(|&c| is_ident(c)) {
            if let Some((a, end)) = ident_at(b, skip_ws(b, i + 2)) {
                alias = Some(a);
                i = end;
            }
        }
        out.push((segs, alias));
        return i;
    }
}

/// A module's path from its file's path below `src/`.
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The inline modules of a file: (byte range of its body, its path below the file's).
fn inline_modules(s: &str) -> Vec<InlineModule> {
    let b = s.as_bytes();
    let mut found = Vec::new();
    let mut stack: Vec<(usize, Vec<String>, usize)> = Vec::new(); // (start, path, depth)
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' {
            depth += 1;
        } else if b[i] == b'}' {
            if let Some((start, path, d)) = stack.last().cloned() {
                if d == depth {
                    found.push((start, i, path));
                    stack.pop();
                }
            }
            depth = depth.saturating_sub(1);
        } else if b[i..].starts_with(b"mod")
            && (i == 0 || !is_ident(b[i - 1]))
            && b.get(i + 3).is_some_and(|c| c.is_ascii_whitespace())
        {
            if let Some((name, end)) = ident_at(b, skip_ws(b, i + 3)) {
                let j = skip_ws(b, end);
                if b.get(j) == Some(&b'{') {
                    let mut path = stack.last().map(|s| s.1.clone()).unwrap_or_default();
                    path.push(name);
                    depth += 1;
                    stack.push((j, path, depth));
                    i = j + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    found
}

fn line_of(s: &str, at: usize) -> usize {
    s[..at].bytes().filter(|&c| c == b'\n').count() + 1
}

impl Crate {
    /// Reads every `.rs` file: `files` maps a path below `src/` to its text.
    fn read(files: &BTreeMap<String, String>) -> Crate {
        let mut krate = Crate::default();
        let stripped: BTreeMap<&String, String> =
            files.iter().map(|(p, s)| (p, strip(s))).collect();
        let mut inline: BTreeMap<&String, Vec<InlineModule>> = BTreeMap::new();
        for (path, s) in &stripped {
            let base = module_of(path);
            krate.modules.insert(base.clone());
            let mods = inline_modules(s);
            for (_, _, sub) in &mods {
                let mut m = base.clone();
                m.extend(sub.iter().cloned());
                krate.modules.insert(m);
            }
            inline.insert(path, mods);
        }
        // Every ancestor of a module is a module (a folder with only children).
        for m in krate.modules.clone() {
            for n in 0..m.len() {
                krate.modules.insert(m[..n].to_vec());
            }
        }
        // Pass 1: each use tree, with its module; re-exports go to the facade table.
        let mut pending = Vec::new();
        for (path, s) in &stripped {
            let base = module_of(path);
            let mods = &inline[path];
            let module_at = |at: usize| {
                let mut m = base.clone();
                if let Some((_, _, sub)) = mods
                    .iter()
                    .filter(|(a, z, _)| *a < at && at < *z)
                    .max_by_key(|(_, _, sub)| sub.len())
                {
                    m.extend(sub.iter().cloned());
                }
                m
            };
            let b = s.as_bytes();
            let mut use_spans = Vec::new();
            let mut i = 0;
            while let Some(p) = s[i..].find("use") {
                let at = i + p;
                i = at + 3;
                if (at > 0 && is_ident(b[at - 1]))
                    || !b.get(at + 3).is_some_and(|c| c.is_ascii_whitespace())
                {
                    continue;
                }
                // `pub use` / `pub(crate) use` / `pub(super) use`: a re-export.
                let head = s[..at].trim_end();
                let reexport = head.ends_with("pub")
                    || head.ends_with(')') && {
                        let open = head.rfind('(').unwrap_or(0);
                        head[..open].trim_end().ends_with("pub")
                    };
                let mut leaves = Vec::new();
                let end = parse_tree(b, at + 3, &[], &mut leaves);
                use_spans.push(at..end);
                let module = module_at(at);
                for (segs, alias) in leaves {
                    pending.push((
                        module.clone(),
                        segs,
                        alias,
                        reexport,
                        (*path).clone(),
                        line_of(s, at),
                    ));
                }
                i = end.max(i);
            }
            // Inline paths: crate::x, super::x, self::x, child::x.
            let mut j = 0;
            while j < b.len() {
                if is_ident_start(b[j]) && (j == 0 || !is_ident(b[j - 1]) && b[j - 1] != b':') {
                    let (first, end) = ident_at(b, j).expect("ident");
                    if b[end..].starts_with(b"::") {
                        let module = module_at(j);
                        let mut segs = vec![first.clone()];
                        let mut k = end;
                        while b[k..].starts_with(b"::") {
                            match ident_at(b, k + 2) {
                                Some((n, e)) => {
                                    segs.push(n);
                                    k = e;
                                }
                                None => break,
                            }
                        }
                        if !use_spans.iter().any(|r| r.contains(&j)) {
                            pending.push((
                                module,
                                segs,
                                None,
                                false,
                                (*path).clone(),
                                line_of(s, j),
                            ));
                        }
                        j = k;
                        continue;
                    }
                    j = end;
                    continue;
                }
                j += 1;
            }
        }
        // Resolve relative paths now that every module is known.
        let mut resolved = Vec::new();
        for (module, segs, alias, reexport, file, line) in pending {
            let Some(abs) = krate.absolute(&module, &segs) else {
                continue;
            };
            if reexport {
                let name = alias.or_else(|| segs.last().cloned()).unwrap_or_default();
                if name != "*" && name != "self" {
                    krate
                        .reexports
                        .entry(module.clone())
                        .or_default()
                        .insert(name, abs.clone());
                }
            } else {
                resolved.push((module, abs, file, line));
            }
        }
        for (from, abs, file, line) in resolved {
            let to = krate.target(&abs, 0);
            krate.uses.push(Use {
                from,
                to,
                file,
                line,
            });
        }
        krate
    }

    /// The absolute path a path written in `module` names, or `None` for a path into
    /// another crate (std, tokio, ...).
    fn absolute(&self, module: &[String], segs: &[String]) -> Option<Vec<String>> {
        let mut segs = segs.to_vec();
        let first = segs.first()?.clone();
        let mut base = match first.as_str() {
            "crate" => {
                segs.remove(0);
                Vec::new()
            }
            "super" | "self" => module.to_vec(),
            _ => {
                let mut child = module.to_vec();
                child.push(first.clone());
                if self.modules.contains(&child) {
                    module.to_vec()
                } else {
                    return None;
                }
            }
        };
        while let Some(s) = segs.first() {
            match s.as_str() {
                "super" => {
                    base.pop();
                    segs.remove(0);
                }
                "self" => {
                    segs.remove(0);
                }
                _ => break,
            }
        }
        segs.retain(|s| s != "self" && s != "*");
        base.extend(segs);
        Some(base)
    }

    /// The deepest module an absolute path names, looking through facades.
    fn target(&self, abs: &[String], hops: usize) -> Vec<String> {
        let mut module: Vec<String> = Vec::new();
        for (n, seg) in abs.iter().enumerate() {
            let mut next = module.clone();
            next.push(seg.clone());
            if self.modules.contains(&next) {
                module = next;
                continue;
            }
            if hops < 8 {
                if let Some(to) = self.reexports.get(&module).and_then(|r| r.get(seg)) {
                    let mut via = to.clone();
                    via.extend(abs[n + 1..].iter().cloned());
                    return self.target(&via, hops + 1);
                }
            }
            break;
        }
        module
    }
}

/// The layer list from `src/lib.rs`: lines `//! N. name: `a`, `b`` under "## Layers",
/// bottom to top. Returns the modules in order with their layer's number.
fn layer_list(lib: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            if inside {
                break;
            }
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with("## ") {
            inside = doc == "## Layers";
            continue;
        }
        if !inside {
            continue;
        }
        let Some((num, rest)) = doc.split_once(". ") else {
            continue;
        };
        let Ok(num) = num.parse::<usize>() else {
            continue;
        };
        let Some((_, mods)) = rest.split_once(':') else {
            continue;
        };
        for part in mods.split('`').skip(1).step_by(2) {
            out.push((part.to_owned(), num));
        }
    }
    out
}

/// Every violation of the two rules, as lines a person can act on.
fn check(krate: &Crate, layers: &[(String, usize)]) -> Vec<String> {
    let mut problems = Vec::new();
    let rank: HashMap<&str, usize> = layers
        .iter()
        .enumerate()
        .map(|(i, (m, _))| (m.as_str(), i))
        .collect();
    let layer: HashMap<&str, usize> = layers.iter().map(|(m, l)| (m.as_str(), *l)).collect();
    for m in &krate.modules {
        if m.len() == 1 && !rank.contains_key(m[0].as_str()) {
            problems.push(format!(
                "module `{}` is not in the layer list (src/lib.rs, ## Layers)",
                m[0]
            ));
        }
    }
    // Rule 1: top-level modules import only modules listed before them.
    for u in &krate.uses {
        let (Some(a), Some(b)) = (u.from.first(), u.to.first()) else {
            continue;
        };
        if a == b {
            continue;
        }
        if let (Some(&ra), Some(&rb)) = (rank.get(a.as_str()), rank.get(b.as_str())) {
            if rb > ra {
                problems.push(format!(
                    "{}:{}: `{}` (layer {}) imports `{}` (layer {}), which is listed above it",
                    u.file,
                    u.line,
                    u.from.join("::"),
                    layer[a.as_str()],
                    u.to.join("::"),
                    layer[b.as_str()],
                ));
            }
        }
    }
    problems.extend(circles(krate));
    let mut seen = BTreeSet::new();
    problems.retain(|p| seen.insert(p.clone()));
    problems
}

/// Rule 2: inside every module, its children do not import each other in a circle.
fn circles(krate: &Crate) -> Vec<String> {
    let mut problems = Vec::new();
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for u in &krate.uses {
        let common = u.from.iter().zip(&u.to).take_while(|(a, b)| a == b).count();
        if common == 0 {
            continue; // across top-level modules: rule 1's business
        }
        let parent = u.from[..common].to_vec();
        let node = |p: &Vec<String>| p.get(common).cloned().unwrap_or_else(|| "(self)".into());
        let (a, b) = (node(&u.from), node(&u.to));
        if a != b {
            graphs
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert((u.file.clone(), u.line));
        }
    }
    for (parent, graph) in &graphs {
        for cycle in cycles(graph) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let (file, line) = &graph[&w[0]][&w[1]];
                    format!("{} -> {} ({file}:{line})", w[0], w[1])
                })
                .collect();
            problems.push(format!(
                "cycle inside `{}`: {}",
                parent.join("::"),
                steps.join(", ")
            ));
        }
    }
    problems
}

/// One cycle (first node repeated at the end) per strongly connected component.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = graph
        .keys()
        .chain(graph.values().flat_map(|e| e.keys()))
        .collect();
    let mut found = Vec::new();
    let mut done: BTreeSet<&String> = BTreeSet::new();
    for &start in &nodes {
        if done.contains(start) {
            continue;
        }
        // Depth-first search for a path back to `start`.
        let mut stack = vec![(start, vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start.clone());
                    for n in &cycle {
                        if let Some(k) = nodes.get(n) {
                            done.insert(k);
                        }
                    }
                    found.push(cycle);
                    stack.clear();
                    break;
                }
                if !done.contains(next) && seen.insert(next) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next, p));
                }
            }
        }
        done.insert(start);
    }
    found
}

fn read_tree(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        let rel = path
            .strip_prefix(root)
            .expect("below src")
            .to_string_lossy()
            .replace('\\', "/");
        if path.is_dir() {
            if rel != "bin" {
                read_tree(&path, root, out);
            }
        } else if rel.ends_with(".rs") {
            out.insert(
                rel,
                std::fs::read_to_string(&path).expect("read a source file"),
            );
        }
    }
}

#[test]
fn every_import_points_down_the_written_layer_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_tree(&root, &root, &mut files);
    let layers = layer_list(&files["lib.rs"]);
    assert!(
        layers.len() > 10,
        "src/lib.rs has no readable \"## Layers\" list: {layers:?}"
    );
    let krate = Crate::read(&files);
    let problems = check(&krate, &layers);
    assert!(
        problems.is_empty(),
        "{} layering problem(s); fix the import or, if the design changed, the list in src/lib.rs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The binary (`src/bin/switchboard/`, a crate of its own over the library's public
/// API): no two of its modules import each other in a circle, at any depth. It has no
/// layer list (four modules and a demo), so rule 1 does not apply; its `main.rs` is
/// its root.
#[test]
fn the_binarys_modules_import_each_other_in_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/switchboard");
    let mut files = BTreeMap::new();
    read_tree(&root, &root, &mut files);
    let main = files.remove("main.rs").expect("the binary's main.rs");
    files.insert("lib.rs".to_owned(), main);
    let krate = Crate::read(&files);
    assert!(
        krate.modules.iter().any(|m| m == &["demo", "report"]),
        "the binary's modules were read: {:?}",
        krate.modules
    );
    let problems = circles(&krate);
    assert!(
        problems.is_empty(),
        "{} circle(s) in the binary:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// A tiny crate in memory, for the checker's own tests.
fn tiny(files: &[(&str, &str)]) -> Vec<String> {
    let files: BTreeMap<String, String> = files
        .iter()
        .map(|(p, s)| ((*p).to_owned(), (*s).to_owned()))
        .collect();
    let layers = layer_list(&files["lib.rs"]);
    check(&Crate::read(&files), &layers)
}

const TINY_LIB: &str = "//! ## Layers\n//! 1. ground: `error`\n//! 2. middle: `mux`\n//! 3. top: `runtime`\nmod error; mod mux; mod runtime;\n";

#[test]
fn an_upward_import_is_reported_with_its_file_and_line() {
    let problems = tiny(&[
        ("lib.rs", TINY_LIB),
        ("error.rs", "pub struct Error;\n"),
        ("mux/mod.rs", "mod core;\npub use core::Conn;\n"),
        ("mux/core.rs", "use crate::error::Error;\n\n// a comment: crate::runtime::X\nfn f() { let _ = crate::runtime::Runtime::new(); }\n"),
        ("runtime.rs", "use crate::mux::Conn;\npub struct Runtime;\n"),
    ]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("mux/core.rs:4: `mux::core` (layer 2) imports `runtime` (layer 3)"),
        "{problems:?}"
    );
}

#[test]
fn a_cycle_between_siblings_is_reported_through_facades_and_super() {
    let problems = tiny(&[
        ("lib.rs", TINY_LIB),
        ("error.rs", ""),
        (
            "mux/mod.rs",
            "mod driver;\nmod handle;\npub(crate) use driver::Command;\npub use handle::Handle;\n",
        ),
        ("mux/driver.rs", "use super::Handle;\npub struct Command;\n"),
        (
            "mux/handle.rs",
            "use crate::mux::{self, Command};\npub struct Handle;\n",
        ),
        ("runtime.rs", ""),
    ]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("cycle inside `mux`: driver -> handle (mux/driver.rs:1), handle -> driver (mux/handle.rs:1)"), "{problems:?}");
}

#[test]
fn tests_and_relative_child_paths_count_for_their_module_and_strings_do_not() {
    let problems = tiny(&[
        ("lib.rs", TINY_LIB),
        ("error.rs", "#[cfg(test)]\nmod tests {\n    use super::*;\n    fn f() { let _ = \"crate::runtime::x\"; let _ = '{'; }\n}\n"),
        ("mux/mod.rs", "mod a;\nmod b;\nfn f() { a::g(); }\n"),
        ("mux/a.rs", "pub fn g() { super::b::h(); }\n"),
        ("mux/b.rs", "pub fn h() {}\n#[cfg(test)]\nmod tests { use crate::mux::a; }\n"),
        ("runtime.rs", ""),
        ("stray.rs", ""),
    ]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p == "module `stray` is not in the layer list (src/lib.rs, ## Layers)"),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("cycle inside `mux`: a -> b")),
        "{problems:?}"
    );
}
