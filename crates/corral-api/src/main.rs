//! Writes a library's public API as text, one line per item, from the JSON
//! rustdoc writes for it (`--output-format json`): every item a user can
//! name, at the path they name it by, with its full signature; the public
//! fields, variants and methods of each type; the traits each implements
//! (blanket implementations left out). Items hidden from the docs are
//! listed too, marked `#[doc(hidden)]`: a user can still call them.
//!
//! `scripts/public-api` writes corral's to `crates/corral/public-api.txt`,
//! and the test suite checks that file against the code, so a change of
//! the public API shows in review.
//!
//! Usage: `corral-api <rustdoc JSON>` (the lines go to standard output).

mod render;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::process::ExitCode;

use serde_json::{Map, Value};

use render::{flag, header, id_key, variant, Names};

/// Where a line sorts, and its text: under the item it belongs to (its
/// path), then by section (the item, its members, inherent impls, trait
/// impls), then by the group it is in (an impl block), then by its place
/// in the group.
type Line = (String, u8, String, String, String);

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: corral-api <rustdoc JSON file>");
        return ExitCode::from(2);
    };
    let json = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
    {
        Ok(json) => json,
        Err(error) => {
            eprintln!("{path}: {error}");
            return ExitCode::FAILURE;
        }
    };
    match public_api(&json) {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{path}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The public API in the JSON of one crate, a line per item, in order.
fn public_api(json: &Value) -> Result<Vec<String>, String> {
    let index = json["index"]
        .as_object()
        .ok_or("no `index`: not rustdoc's JSON")?;
    let defined = json["paths"]
        .as_object()
        .ok_or("no `paths`: not rustdoc's JSON")?;
    let root = id_key(&json["root"]).ok_or("no `root`: not rustdoc's JSON")?;
    let root_item = index
        .get(&root)
        .ok_or("the root module is not in the index")?;
    let name = root_item["name"].as_str().unwrap_or("crate").to_owned();

    let mut reached = Vec::new();
    let mut seen = HashSet::new();
    reach(index, &root, &name, &mut reached, &mut seen);
    let mut public: HashMap<String, String> = HashMap::new();
    for (path, id) in &reached {
        let shorter = |known: &String| shorter_path(path, known);
        if public.get(id).is_none_or(shorter) {
            public.insert(id.clone(), path.clone());
        }
    }

    let mut api = Api {
        index,
        names: Names { public, defined },
        lines: BTreeSet::new(),
        impls_done: HashSet::new(),
        traits: Vec::new(),
    };
    api.line(&name, 0, format!("pub mod {name}"));
    for (path, id) in &reached {
        api.item(path, id);
    }
    for (path, id) in std::mem::take(&mut api.traits) {
        api.trait_impls(&path, &id);
    }
    Ok(api
        .lines
        .into_iter()
        .map(|(_, _, _, _, text)| text)
        .collect())
}

/// Whether `path` names an item better than `known`: fewer segments, then
/// first in order.
fn shorter_path(path: &str, known: &str) -> bool {
    let segments = |p: &str| p.matches("::").count();
    (segments(path), path) < (segments(known), known)
}

/// Every item reachable from module `id` by public paths, as (path, id):
/// through public modules and re-exports, globs included.
fn reach(
    index: &Map<String, Value>,
    id: &str,
    prefix: &str,
    out: &mut Vec<(String, String)>,
    seen: &mut HashSet<(String, String)>,
) {
    if !seen.insert((id.to_owned(), prefix.to_owned())) {
        return;
    }
    let Some(module) = index.get(id) else { return };
    let items = module["inner"]["module"]["items"].as_array();
    for child in items.into_iter().flatten() {
        let Some(child) = id_key(child) else { continue };
        let Some(item) = index.get(&child) else {
            continue;
        };
        if item["visibility"] != "public" {
            continue;
        }
        let (kind, inner) = variant(&item["inner"]);
        if kind == "use" {
            reach_use(index, inner, &child, prefix, out, seen);
            continue;
        }
        let Some(name) = item["name"].as_str() else {
            continue;
        };
        let path = format!("{prefix}::{name}");
        out.push((path.clone(), child.clone()));
        if kind == "module" {
            reach(index, &child, &path, out, seen);
        }
    }
}

/// A `pub use`: the item it names under the name it gives, a glob's
/// module's items, or (for an item of another crate) the `use` itself.
fn reach_use(
    index: &Map<String, Value>,
    inner: &Value,
    use_id: &str,
    prefix: &str,
    out: &mut Vec<(String, String)>,
    seen: &mut HashSet<(String, String)>,
) {
    let target = id_key(&inner["id"]).filter(|target| index.contains_key(target));
    let glob = inner["is_glob"] == true;
    match (target, glob) {
        (Some(target), true) => reach(index, &target, prefix, out, seen),
        (Some(target), false) => {
            let path = format!("{prefix}::{}", inner["name"].as_str().unwrap_or("_"));
            out.push((path.clone(), target.clone()));
            if index[&target]["inner"].get("module").is_some() {
                reach(index, &target, &path, out, seen);
            }
        }
        (None, _) => {
            let name = if glob {
                "*"
            } else {
                inner["name"].as_str().unwrap_or("_")
            };
            out.push((format!("{prefix}::{name}"), use_id.to_owned()));
        }
    }
}

/// The auto traits of stable Rust.
const STABLE_AUTO_TRAITS: [&str; 5] = [
    "core::marker::Send",
    "core::marker::Sync",
    "core::marker::Unpin",
    "core::panic::unwind_safe::UnwindSafe",
    "core::panic::unwind_safe::RefUnwindSafe",
];

/// Unstable traits that derives implement beside the one derived.
const DERIVE_MARKERS: [&str; 2] = [
    "core::marker::StructuralPartialEq",
    "core::clone::TrivialClone",
];

struct Api<'a> {
    index: &'a Map<String, Value>,
    names: Names<'a>,
    lines: BTreeSet<Line>,
    impls_done: HashSet<String>,
    /// Traits met, whose implementations are listed once every type has
    /// listed its own.
    traits: Vec<(String, String)>,
}

impl Api<'_> {
    fn line(&mut self, owner: &str, section: u8, text: String) {
        let key = text.clone();
        self.lines
            .insert((owner.to_owned(), section, key.clone(), key, text));
    }

    /// The lines of the item `id` reached at `path`.
    fn item(&mut self, path: &str, id: &str) {
        let Some(item) = self.index.get(id) else {
            return;
        };
        let (kind, inner) = variant(&item["inner"]);
        let chosen = self.names.public.get(id).cloned();
        if kind != "use" && chosen.as_deref() != Some(path) {
            let chosen = chosen.unwrap_or_default();
            self.line(path, 0, format!("pub use {path} = {chosen}"));
            return;
        }
        let attrs = attributes(item);
        let names = &self.names;
        let text = match kind {
            "module" => format!("{attrs}pub mod {path}"),
            "use" => {
                let source = names.path(&inner["id"], inner["source"].as_str().unwrap_or("?"));
                format!("{attrs}pub use {path} = {source}")
            }
            "function" => format!("{attrs}pub {}", self.function(path, inner)),
            "constant" => format!("{attrs}pub const {path}: {}", names.ty(&inner["type"])),
            "static" => {
                let mutability = flag(&inner["is_mutable"], "mut ");
                let ty = names.ty(&inner["type"]);
                format!("{attrs}pub static {mutability}{path}: {ty}")
            }
            "type_alias" => format!(
                "{attrs}pub type {path}{} = {}{}",
                names.params(&inner["generics"]),
                names.ty(&inner["type"]),
                names.where_clause(&inner["generics"])
            ),
            "macro" => format!("{attrs}pub macro {path}!"),
            "proc_macro" => format!("{attrs}pub proc_macro {path}"),
            "struct" | "union" => self.structure(path, kind, inner, &attrs),
            "enum" => self.enumeration(path, inner, &attrs),
            "trait" => self.trait_item(path, id, inner, &attrs),
            other => format!("{attrs}pub {other} {path}"),
        };
        self.line(path, 0, text);
    }

    /// `fn path<..>(..) -> .. where ..`, with its header.
    fn function(&self, path: &str, inner: &Value) -> String {
        let names = &self.names;
        format!(
            "{}fn {path}{}{}{}",
            header(&inner["header"]),
            names.params(&inner["generics"]),
            names.signature(&inner["sig"]),
            names.where_clause(&inner["generics"])
        )
    }

    fn structure(&mut self, path: &str, kind: &str, inner: &Value, attrs: &str) -> String {
        let names = &self.names;
        let generics = names.params(&inner["generics"]);
        let where_clause = names.where_clause(&inner["generics"]);
        let (shape, body) = variant(&inner["kind"]);
        let fields = match shape {
            "plain" => {
                self.fields(path, &body["fields"]);
                flag(&body["has_stripped_fields"], " { .. }").to_owned()
            }
            "tuple" => format!("({})", self.tuple_fields(body)),
            "unit" => String::new(),
            _ => {
                self.fields(path, &inner["fields"]);
                String::new()
            }
        };
        self.impls(path, &inner["impls"]);
        format!("{attrs}pub {kind} {path}{generics}{fields}{where_clause}")
    }

    /// `pub T` for each public field of a tuple struct or variant, `_` for
    /// each private one.
    fn tuple_fields(&self, fields: &Value) -> String {
        let fields = fields.as_array().into_iter().flatten();
        let fields = fields.map(|field| {
            let item = id_key(field).and_then(|id| self.index.get(&id));
            match item {
                Some(item) => {
                    let vis = if item["visibility"] == "public" {
                        "pub "
                    } else {
                        ""
                    };
                    format!("{vis}{}", self.names.ty(&item["inner"]["struct_field"]))
                }
                None => "_".to_owned(),
            }
        });
        fields.collect::<Vec<_>>().join(", ")
    }

    /// A line per public named field.
    fn fields(&mut self, path: &str, fields: &Value) {
        for field in fields.as_array().into_iter().flatten() {
            let Some(item) = id_key(field).and_then(|id| self.index.get(&id)) else {
                continue;
            };
            if item["visibility"] != "public" {
                continue;
            }
            let name = item["name"].as_str().unwrap_or("_");
            let ty = self.names.ty(&item["inner"]["struct_field"]);
            let attrs = attributes(item);
            self.line(path, 1, format!("{attrs}pub {path}::{name}: {ty}"));
        }
    }

    fn enumeration(&mut self, path: &str, inner: &Value, attrs: &str) -> String {
        for variant_id in inner["variants"].as_array().into_iter().flatten() {
            let Some(item) = id_key(variant_id).and_then(|id| self.index.get(&id)) else {
                continue;
            };
            let name = item["name"].as_str().unwrap_or("_");
            let body = &item["inner"]["variant"];
            let shape = match variant(&body["kind"]) {
                ("tuple", fields) => format!("({})", self.tuple_fields(fields)),
                ("struct", fields) => {
                    let names = fields["fields"].as_array().into_iter().flatten();
                    let names = names.filter_map(|f| id_key(f).and_then(|id| self.index.get(&id)));
                    let rendered: Vec<String> = names
                        .map(|f| {
                            let ty = self.names.ty(&f["inner"]["struct_field"]);
                            format!("{}: {ty}", f["name"].as_str().unwrap_or("_"))
                        })
                        .collect();
                    format!(" {{ {} }}", rendered.join(", "))
                }
                _ => String::new(),
            };
            let discriminant = match body["discriminant"]["expr"].as_str() {
                Some(expr) => format!(" = {expr}"),
                None => String::new(),
            };
            let attrs = attributes(item);
            self.line(
                path,
                1,
                format!("{attrs}pub {path}::{name}{shape}{discriminant}"),
            );
        }
        self.impls(path, &inner["impls"]);
        let stripped = flag(&inner["has_stripped_variants"], " { .. }");
        format!(
            "{attrs}pub enum {path}{}{stripped}{}",
            self.names.params(&inner["generics"]),
            self.names.where_clause(&inner["generics"])
        )
    }

    fn trait_item(&mut self, path: &str, id: &str, inner: &Value, attrs: &str) -> String {
        for member in inner["items"].as_array().into_iter().flatten() {
            let Some(item) = id_key(member).and_then(|id| self.index.get(&id)) else {
                continue;
            };
            let member_path = format!("{path}::{}", item["name"].as_str().unwrap_or("_"));
            let text = self.associated(&member_path, item, true);
            self.line(path, 1, text);
        }
        self.traits.push((path.to_owned(), id.to_owned()));
        let names = &self.names;
        let bounds = match names.bounds(&inner["bounds"]) {
            bounds if bounds.is_empty() => bounds,
            bounds => format!(": {bounds}"),
        };
        let unsafety = flag(&inner["is_unsafe"], "unsafe ");
        let auto = flag(&inner["is_auto"], "auto ");
        format!(
            "{attrs}pub {unsafety}{auto}trait {path}{}{bounds}{}",
            names.params(&inner["generics"]),
            names.where_clause(&inner["generics"])
        )
    }

    /// A trait's or an impl's function, type or constant. In a trait, a
    /// function with a default body ends `{ .. }`.
    fn associated(&self, path: &str, item: &Value, in_trait: bool) -> String {
        let names = &self.names;
        let attrs = attributes(item);
        let vis = if item["visibility"] == "public" {
            "pub "
        } else {
            ""
        };
        let (kind, inner) = variant(&item["inner"]);
        match kind {
            "function" => {
                let body = if in_trait && inner["has_body"] == true {
                    " { .. }"
                } else {
                    ""
                };
                format!("{attrs}{vis}{}{body}", self.function(path, inner))
            }
            "assoc_type" => {
                let bounds = match names.bounds(&inner["bounds"]) {
                    b if b.is_empty() => b,
                    b => format!(": {b}"),
                };
                let value = match &inner["type"] {
                    Value::Null => String::new(),
                    ty => format!(" = {}", names.ty(ty)),
                };
                let generics = names.params(&inner["generics"]);
                format!("{attrs}{vis}type {path}{generics}{bounds}{value}")
            }
            "assoc_const" => format!("{attrs}{vis}const {path}: {}", names.ty(&inner["type"])),
            other => format!("{attrs}{vis}{other} {path}"),
        }
    }

    /// The impls of a type, or of a trait: each once, blanket ones left out.
    fn impls(&mut self, owner: &str, impls: &Value) {
        for impl_id in impls.as_array().into_iter().flatten() {
            let Some(key) = id_key(impl_id) else { continue };
            let Some(item) = self.index.get(&key) else {
                continue;
            };
            let inner = &item["inner"]["impl"];
            if !inner["blanket_impl"].is_null() || !self.nameable(inner) {
                continue;
            }
            if !self.impls_done.insert(key) {
                continue;
            }
            self.impl_block(owner, inner);
        }
    }

    /// Whether stable Rust can name the trait an impl implements: of the
    /// auto traits rustdoc adds, the five stable ones; none of the unstable
    /// markers derives add. Those change with the toolchain.
    fn nameable(&self, inner: &Value) -> bool {
        let tr = &inner["trait"];
        if tr.is_null() {
            return true;
        }
        let path = self
            .names
            .path(&tr["id"], tr["path"].as_str().unwrap_or(""));
        if inner["is_synthetic"] == true {
            return STABLE_AUTO_TRAITS.contains(&path.as_str());
        }
        !DERIVE_MARKERS.contains(&path.as_str())
    }

    fn trait_impls(&mut self, path: &str, id: &str) {
        let Some(item) = self.index.get(id) else {
            return;
        };
        self.impls(path, &item["inner"]["trait"]["implementations"]);
    }

    /// An inherent impl: its header, then a line per public item. A trait
    /// impl: one line, with the associated types and constants it sets.
    fn impl_block(&mut self, owner: &str, inner: &Value) {
        let names = &self.names;
        let unsafety = flag(&inner["is_unsafe"], "unsafe ");
        let negative = flag(&inner["is_negative"], "!");
        let generics = names.params(&inner["generics"]);
        let for_type = names.ty(&inner["for"]);
        let where_clause = names.where_clause(&inner["generics"]);
        let items: Vec<&Value> = inner["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|id| id_key(id).and_then(|id| self.index.get(&id)))
            .collect();
        if inner["trait"].is_null() {
            let head = format!("{unsafety}impl{generics} {for_type}{where_clause}");
            let mut lines = vec![head.clone()];
            for item in items
                .into_iter()
                .filter(|item| item["visibility"] == "public")
            {
                let path = format!("{owner}::{}", item["name"].as_str().unwrap_or("_"));
                lines.push(self.associated(&path, item, false));
            }
            for (n, text) in lines.into_iter().enumerate() {
                let order = if n == 0 { String::new() } else { text.clone() };
                self.lines
                    .insert((owner.to_owned(), 2, head.clone(), order, text));
            }
            return;
        }
        let tr = names.resolved(&inner["trait"]);
        let set: Vec<String> = items
            .into_iter()
            .filter(|item| item["inner"].get("function").is_none())
            .map(|item| {
                let name = item["name"].as_str().unwrap_or("_");
                match variant(&item["inner"]) {
                    ("assoc_type", t) => format!("type {name} = {};", names.ty(&t["type"])),
                    ("assoc_const", c) => format!("const {name}: {};", names.ty(&c["type"])),
                    _ => format!("{name};"),
                }
            })
            .collect();
        let set = if set.is_empty() {
            String::new()
        } else {
            format!(" {{ {} }}", set.join(" "))
        };
        let text =
            format!("{unsafety}impl{generics} {negative}{tr} for {for_type}{where_clause}{set}");
        self.line(owner, 3, text);
    }
}

/// What the line of an item says before it: `#[doc(hidden)]`,
/// `#[non_exhaustive]`, `#[deprecated]`.
fn attributes(item: &Value) -> String {
    let attrs: Vec<String> = item["attrs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|attr| match attr {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let mut out = String::new();
    if attrs.iter().any(|a| a.contains("doc(hidden)")) {
        out.push_str("#[doc(hidden)] ");
    }
    if attrs.iter().any(|a| a.contains("non_exhaustive")) {
        out.push_str("#[non_exhaustive] ");
    }
    if !item["deprecation"].is_null() {
        out.push_str("#[deprecated] ");
    }
    out
}
