//! Types, generics, bounds and signatures from rustdoc's JSON, written as
//! Rust source would write them, with every path spelled in full: an
//! item of the documented crate by the public path it is reached at, any
//! other by its defining crate's path (`core::option::Option`).

use std::collections::HashMap;

use serde_json::Value;

/// How an item's id is written as a path.
pub(crate) struct Names<'a> {
    /// The documented crate's items, by the public path found first.
    pub(crate) public: HashMap<String, String>,
    /// rustdoc's `paths`: where every item it knows of is defined.
    pub(crate) defined: &'a serde_json::Map<String, Value>,
}

/// An id as the index keys it: rustdoc writes ids as numbers (older
/// formats as strings).
pub(crate) fn id_key(id: &Value) -> Option<String> {
    match id {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The single key of an externally tagged enum value and what it holds
/// (`{"generic": "T"}`), or a unit variant written as a string.
pub(crate) fn variant(value: &Value) -> (&str, &Value) {
    match value {
        Value::Object(map) if map.len() == 1 => match map.iter().next() {
            Some((key, inner)) => (key.as_str(), inner),
            None => ("", &Value::Null),
        },
        Value::String(s) => (s.as_str(), &Value::Null),
        _ => ("", &Value::Null),
    }
}

/// `word` if the JSON `value` is `true`, else nothing.
pub(crate) fn flag<'w>(value: &Value, word: &'w str) -> &'w str {
    if *value == true {
        word
    } else {
        ""
    }
}

/// `items` joined by `sep` between `before` and `after`; nothing if there
/// are none.
pub(crate) fn enclose(items: &[String], before: &str, sep: &str, after: &str) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!("{before}{}{after}", items.join(sep))
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

fn list(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

impl Names<'_> {
    /// The path an id is written with; `written` (as the source wrote it)
    /// when rustdoc knows nothing of the id.
    pub(crate) fn path(&self, id: &Value, written: &str) -> String {
        let Some(key) = id_key(id) else {
            return written.to_owned();
        };
        if let Some(path) = self.public.get(&key) {
            return path.clone();
        }
        match self
            .defined
            .get(&key)
            .and_then(|summary| summary.get("path"))
        {
            Some(Value::Array(parts)) => parts.iter().map(text).collect::<Vec<_>>().join("::"),
            _ => written.to_owned(),
        }
    }

    /// A type.
    pub(crate) fn ty(&self, ty: &Value) -> String {
        let (kind, inner) = variant(ty);
        match kind {
            "resolved_path" => self.resolved(inner),
            "generic" | "primitive" => text(inner).to_owned(),
            "infer" => "_".to_owned(),
            "tuple" => match list(inner) {
                [one] => format!("({},)", self.ty(one)),
                items => format!("({})", self.join(items, |t| self.ty(t))),
            },
            "slice" => format!("[{}]", self.ty(inner)),
            "array" => format!("[{}; {}]", self.ty(&inner["type"]), text(&inner["len"])),
            "pat" => self.ty(&inner["type"]),
            "raw_pointer" => {
                let mutability = if inner["is_mutable"] == true {
                    "mut"
                } else {
                    "const"
                };
                format!("*{mutability} {}", self.pointee(&inner["type"]))
            }
            "borrowed_ref" => {
                let mut out = String::from("&");
                if let Some(lifetime) = inner["lifetime"].as_str() {
                    out.push_str(lifetime);
                    out.push(' ');
                }
                out.push_str(flag(&inner["is_mutable"], "mut "));
                out + &self.pointee(&inner["type"])
            }
            "impl_trait" => format!("impl {}", self.bounds(inner)),
            "dyn_trait" => self.dyn_trait(inner),
            "function_pointer" => self.function_pointer(inner),
            "qualified_path" => self.qualified(inner),
            other => format!("/* {other} */"),
        }
    }

    /// What a reference or pointer points to: `dyn A + B` and `impl A + B`
    /// in parentheses, as Rust needs them there.
    fn pointee(&self, ty: &Value) -> String {
        let rendered = self.ty(ty);
        let (kind, _) = variant(ty);
        if matches!(kind, "dyn_trait" | "impl_trait") && rendered.contains(" + ") {
            format!("({rendered})")
        } else {
            rendered
        }
    }

    fn join(&self, items: &[Value], each: impl Fn(&Value) -> String) -> String {
        items.iter().map(each).collect::<Vec<_>>().join(", ")
    }

    /// A path to a type or trait with its generic arguments.
    pub(crate) fn resolved(&self, path: &Value) -> String {
        let name = self.path(&path["id"], text(&path["path"]));
        name + &self.args(&path["args"])
    }

    /// Generic arguments: `<T, Item = U>`, `(A) -> B`, or nothing.
    fn args(&self, args: &Value) -> String {
        let (kind, inner) = variant(args);
        match kind {
            "angle_bracketed" => {
                let mut parts: Vec<String> = list(&inner["args"])
                    .iter()
                    .map(|arg| self.arg(arg))
                    .collect();
                let constraints = list(&inner["constraints"]).iter();
                parts.extend(constraints.map(|c| self.constraint(c)));
                enclose(&parts, "<", ", ", ">")
            }
            "parenthesized" => {
                let inputs = self.join(list(&inner["inputs"]), |t| self.ty(t));
                match &inner["output"] {
                    Value::Null => format!("({inputs})"),
                    output => format!("({inputs}) -> {}", self.ty(output)),
                }
            }
            "return_type_notation" => "(..)".to_owned(),
            _ => String::new(),
        }
    }

    fn arg(&self, arg: &Value) -> String {
        let (kind, inner) = variant(arg);
        match kind {
            "lifetime" => text(inner).to_owned(),
            "type" => self.ty(inner),
            "const" => text(&inner["expr"]).to_owned(),
            _ => "_".to_owned(),
        }
    }

    /// `Item = T` or `Item: Bound`.
    fn constraint(&self, constraint: &Value) -> String {
        let name = text(&constraint["name"]).to_owned() + &self.args(&constraint["args"]);
        let (kind, binding) = variant(&constraint["binding"]);
        match kind {
            "equality" => {
                let (term, value) = variant(binding);
                match term {
                    "type" => format!("{name} = {}", self.ty(value)),
                    _ => format!("{name} = {}", text(&value["expr"])),
                }
            }
            "constraint" => format!("{name}: {}", self.bounds(binding)),
            _ => name,
        }
    }

    /// Bounds joined by `+`.
    pub(crate) fn bounds(&self, bounds: &Value) -> String {
        list(bounds)
            .iter()
            .map(|bound| self.bound(bound))
            .collect::<Vec<_>>()
            .join(" + ")
    }

    fn bound(&self, bound: &Value) -> String {
        let (kind, inner) = variant(bound);
        match kind {
            "trait_bound" => {
                let modifier = match text(&inner["modifier"]) {
                    "maybe" => "?",
                    "maybe_const" => "~const ",
                    _ => "",
                };
                format!(
                    "{}{modifier}{}",
                    self.higher_ranked(&inner["generic_params"]),
                    self.resolved(&inner["trait"])
                )
            }
            "outlives" => text(inner).to_owned(),
            "use" => {
                let captured = list(inner).iter().map(|arg| match variant(arg) {
                    ("lifetime" | "param", name) => text(name).to_owned(),
                    _ => text(arg).to_owned(),
                });
                format!("use<{}>", captured.collect::<Vec<_>>().join(", "))
            }
            other => format!("/* {other} */"),
        }
    }

    /// `for<'a> ` for higher-ranked parameters, or nothing.
    fn higher_ranked(&self, params: &Value) -> String {
        match list(params) {
            [] => String::new(),
            params => format!("for<{}> ", self.join(params, |p| self.param(p))),
        }
    }

    fn dyn_trait(&self, inner: &Value) -> String {
        let mut parts: Vec<String> = list(&inner["traits"])
            .iter()
            .map(|poly| {
                self.higher_ranked(&poly["generic_params"]) + &self.resolved(&poly["trait"])
            })
            .collect();
        if let Some(lifetime) = inner["lifetime"].as_str() {
            parts.push(lifetime.to_owned());
        }
        format!("dyn {}", parts.join(" + "))
    }

    fn function_pointer(&self, inner: &Value) -> String {
        let sig = &inner["sig"];
        let inputs = self.join(list(&sig["inputs"]), |input| self.ty(&input[1]));
        let output = match &sig["output"] {
            Value::Null => String::new(),
            output => format!(" -> {}", self.ty(output)),
        };
        format!(
            "{}{}fn({inputs}){output}",
            self.higher_ranked(&inner["generic_params"]),
            header(&inner["header"])
        )
    }

    fn qualified(&self, inner: &Value) -> String {
        let name = text(&inner["name"]).to_owned() + &self.args(&inner["args"]);
        let self_type = self.ty(&inner["self_type"]);
        match &inner["trait"] {
            Value::Null => format!("{self_type}::{name}"),
            tr => format!("<{self_type} as {}>::{name}", self.resolved(tr)),
        }
    }

    /// One generic parameter as declared: `'a: 'b`, `T: Bound = Default`,
    /// `const N: usize`.
    fn param(&self, param: &Value) -> String {
        let name = text(&param["name"]).to_owned();
        let (kind, inner) = variant(&param["kind"]);
        match kind {
            "lifetime" => match list(&inner["outlives"]) {
                [] => name,
                outlives => format!("{name}: {}", self.join(outlives, |l| text(l).to_owned())),
            },
            "type" => {
                let mut out = name;
                if !list(&inner["bounds"]).is_empty() {
                    out = format!("{out}: {}", self.bounds(&inner["bounds"]));
                }
                if !inner["default"].is_null() {
                    out = format!("{out} = {}", self.ty(&inner["default"]));
                }
                out
            }
            "const" => format!("const {name}: {}", self.ty(&inner["type"])),
            _ => name,
        }
    }

    /// The parameters of `generics` (leaving out the ones rustdoc made up
    /// for `impl Trait` arguments), `<..>` or nothing.
    pub(crate) fn params(&self, generics: &Value) -> String {
        let params: Vec<String> = list(&generics["params"])
            .iter()
            .filter(|param| variant(&param["kind"]).1["is_synthetic"] != true)
            .map(|param| self.param(param))
            .collect();
        enclose(&params, "<", ", ", ">")
    }

    /// ` where ..` for the predicates of `generics`, or nothing.
    pub(crate) fn where_clause(&self, generics: &Value) -> String {
        let predicates: Vec<String> = list(&generics["where_predicates"])
            .iter()
            .map(|predicate| match variant(predicate) {
                ("bound_predicate", p) => format!(
                    "{}{}: {}",
                    self.higher_ranked(&p["generic_params"]),
                    self.ty(&p["type"]),
                    self.bounds(&p["bounds"])
                ),
                ("lifetime_predicate", p) => format!(
                    "{}: {}",
                    text(&p["lifetime"]),
                    self.join(list(&p["outlives"]), |l| text(l).to_owned())
                ),
                ("eq_predicate", p) => {
                    let (_, rhs) = variant(&p["rhs"]);
                    format!("{} = {}", self.ty(&p["lhs"]), self.ty(rhs))
                }
                (other, _) => format!("/* {other} */"),
            })
            .collect();
        enclose(&predicates, " where ", ", ", "")
    }

    /// A function's parameters and return type: `(&self, key: &str) -> T`.
    pub(crate) fn signature(&self, sig: &Value) -> String {
        let inputs = self.join(list(&sig["inputs"]), |input| {
            let name = text(&input[0]);
            let ty = &input[1];
            if name != "self" {
                return format!("{name}: {}", self.ty(ty));
            }
            match variant(ty) {
                ("generic", s) if s == "Self" => "self".to_owned(),
                ("borrowed_ref", r) if r["type"]["generic"] == "Self" => {
                    let rendered = self.ty(ty);
                    rendered.trim_end_matches("Self").to_owned() + "self"
                }
                _ => format!("self: {}", self.ty(ty)),
            }
        });
        match &sig["output"] {
            Value::Null => format!("({inputs})"),
            output => format!("({inputs}) -> {}", self.ty(output)),
        }
    }
}

/// `const `, `async `, `unsafe `, `extern "C" ` as a function's header says.
pub(crate) fn header(header: &Value) -> String {
    let mut out = String::new();
    for (key, word) in [
        ("is_const", "const "),
        ("is_async", "async "),
        ("is_unsafe", "unsafe "),
    ] {
        out.push_str(flag(&header[key], word));
    }
    match variant(&header["abi"]) {
        ("Rust", _) | ("", _) => {}
        (abi, _) => out.push_str(&format!("extern \"{abi}\" ")),
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names(defined: &serde_json::Map<String, Value>) -> Names<'_> {
        let mut public = HashMap::new();
        public.insert("7".to_owned(), "corral::Cache".to_owned());
        Names { public, defined }
    }

    #[test]
    fn paths_are_public_or_defining_or_as_written() {
        let defined =
            json!({"19": {"crate_id": 2, "path": ["core", "option", "Option"], "kind": "enum"}});
        let names = names(defined.as_object().expect("an object"));
        let ty = json!({"resolved_path": {"path": "Option", "id": 19, "args": {"angle_bracketed": {
            "args": [{"type": {"resolved_path": {"path": "cache::Cache", "id": 7, "args": null}}}],
            "constraints": []}}}});
        assert_eq!(names.ty(&ty), "core::option::Option<corral::Cache>");
        let unknown = json!({"resolved_path": {"path": "Mystery", "id": 99, "args": null}});
        assert_eq!(names.ty(&unknown), "Mystery");
    }

    #[test]
    fn references_pointers_tuples_and_bounds_read_as_rust() {
        let defined = json!({});
        let names = names(defined.as_object().expect("an object"));
        let str_ref = json!({"borrowed_ref": {"lifetime": "'a", "is_mutable": false, "type": {"primitive": "str"}}});
        assert_eq!(names.ty(&str_ref), "&'a str");
        let unit = json!({"tuple": []});
        assert_eq!(names.ty(&unit), "()");
        let one = json!({"tuple": [{"generic": "T"}]});
        assert_eq!(names.ty(&one), "(T,)");
        let boxed = json!({"dyn_trait": {"traits": [
            {"trait": {"path": "Fn", "id": null, "args": {"parenthesized": {"inputs": [{"generic": "A"}], "output": null}}}, "generic_params": []}
        ], "lifetime": "'static"}});
        assert_eq!(names.ty(&boxed), "dyn Fn(A) + 'static");
        let borrowed =
            json!({"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": boxed}});
        assert_eq!(names.ty(&borrowed), "&(dyn Fn(A) + 'static)");
        let sized = json!([{"trait_bound": {"trait": {"path": "Sized", "id": null, "args": null}, "generic_params": [], "modifier": "maybe"}}]);
        assert_eq!(names.bounds(&sized), "?Sized");
    }

    #[test]
    fn signatures_write_self_as_rust_does() {
        let defined = json!({});
        let names = names(defined.as_object().expect("an object"));
        let sig = json!({"inputs": [
            ["self", {"borrowed_ref": {"lifetime": null, "is_mutable": true, "type": {"generic": "Self"}}}],
            ["key", {"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": {"primitive": "str"}}}]
        ], "output": {"primitive": "bool"}});
        assert_eq!(names.signature(&sig), "(&mut self, key: &str) -> bool");
        let by_value = json!({"inputs": [["self", {"generic": "Self"}]], "output": null});
        assert_eq!(names.signature(&by_value), "(self)");
    }
}
