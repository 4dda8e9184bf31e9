//! The filter language of SPEC §16 over a jsonb column (`memory.search`'s `filter` over an
//! item's value): `{"field": v}` (equality, JSON-typed), `{"field": {"$eq"|"$ne"|"$gt"|"$gte"|
//! "$lt"|"$lte": v}}` (numbers compare numerically, strings bytewise), `$in`, `$nin`, `$exists`,
//! `$contains` (an array's element, or a substring), dotted paths (`"a.b"`), and `$and`, `$or`,
//! `$not` combining them. An unknown operator or a value of the wrong kind is a `FilterError`
//! (22023 in SQL), naming the operator or the field, never echoing a value.

use serde_json::Value;

/// The deepest nesting of `$and`/`$or`/`$not` a filter may have.
pub const MAX_DEPTH: usize = 32;

/// A comparison of a field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Eq(Value),
    Ne(Value),
    /// `$gt`, `$gte`, `$lt`, `$lte`: a number or a string.
    Cmp(Cmp, Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    Contains(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

impl Cmp {
    pub fn sql(self) -> &'static str {
        match self {
            Cmp::Gt => ">",
            Cmp::Gte => ">=",
            Cmp::Lt => "<",
            Cmp::Lte => "<=",
        }
    }
}

/// A filter tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Every one (none: true).
    And(Vec<Filter>),
    /// Any one (none: false).
    Or(Vec<Filter>),
    Not(Box<Filter>),
    /// The value at `path` (labels of a dotted path) compared by `op`.
    Field { path: Vec<String>, op: Op },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilterError {}

pub const HINT: &str = "filter is an object of fields (dotted paths) to a JSON value (equality) or to an object of \
$eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $exists, $contains; $and and $or take an array of filters, $not a filter.";

fn err(msg: String) -> FilterError {
    FilterError(msg)
}

/// Parses a filter (`null`: no filter, true).
pub fn parse(v: &Value) -> Result<Filter, FilterError> {
    match v {
        Value::Null => Ok(Filter::And(Vec::new())),
        _ => parse_at(v, 0),
    }
}

/// jsonb_typeof's name of a JSON value.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn parse_at(v: &Value, depth: usize) -> Result<Filter, FilterError> {
    if depth > MAX_DEPTH {
        return Err(err(format!("filter is nested deeper than {MAX_DEPTH} levels")));
    }
    let Value::Object(m) = v else {
        return Err(err(format!("a filter must be a JSON object, not {}", kind(v))));
    };
    let mut all = Vec::with_capacity(m.len());
    for (key, val) in m {
        match key.as_str() {
            "$and" | "$or" => {
                let Value::Array(items) = val else {
                    return Err(err(format!("filter operator {key} takes an array of filters, not {}", kind(val))));
                };
                let parts = items.iter().map(|i| parse_at(i, depth + 1)).collect::<Result<Vec<_>, _>>()?;
                all.push(if key == "$and" { Filter::And(parts) } else { Filter::Or(parts) });
            }
            "$not" => all.push(Filter::Not(Box::new(parse_at(val, depth + 1)?))),
            k if k.starts_with('$') => return Err(err(format!("unknown filter operator \"{}\"", short(k)))),
            field => {
                if field.is_empty() || field.split('.').any(str::is_empty) {
                    return Err(err(format!("filter field \"{}\" has an empty label", short(field))));
                }
                let path: Vec<String> = field.split('.').map(str::to_owned).collect();
                match val {
                    Value::Object(ops) if !ops.is_empty() && ops.keys().all(|k| k.starts_with('$')) => {
                        for (op, arg) in ops {
                            all.push(Filter::Field { path: path.clone(), op: parse_op(field, op, arg)? });
                        }
                    }
                    _ => all.push(Filter::Field { path, op: Op::Eq(val.clone()) }),
                }
            }
        }
    }
    Ok(if all.len() == 1 { all.pop().expect("one") } else { Filter::And(all) })
}

/// At most 64 characters of a name in a message.
fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

fn parse_op(field: &str, op: &str, arg: &Value) -> Result<Op, FilterError> {
    let scalar = |a: &Value| -> Result<Value, FilterError> {
        match a {
            Value::Number(_) | Value::String(_) => Ok(a.clone()),
            _ => Err(err(format!("filter {op} on \"{}\" compares a number or a string, not {}", short(field), kind(a)))),
        }
    };
    let list = |a: &Value| -> Result<Vec<Value>, FilterError> {
        match a {
            Value::Array(items) => Ok(items.clone()),
            _ => Err(err(format!("filter {op} on \"{}\" takes an array, not {}", short(field), kind(a)))),
        }
    };
    Ok(match op {
        "$eq" => Op::Eq(arg.clone()),
        "$ne" => Op::Ne(arg.clone()),
        "$gt" => Op::Cmp(Cmp::Gt, scalar(arg)?),
        "$gte" => Op::Cmp(Cmp::Gte, scalar(arg)?),
        "$lt" => Op::Cmp(Cmp::Lt, scalar(arg)?),
        "$lte" => Op::Cmp(Cmp::Lte, scalar(arg)?),
        "$in" => Op::In(list(arg)?),
        "$nin" => Op::Nin(list(arg)?),
        "$exists" => match arg {
            Value::Bool(b) => Op::Exists(*b),
            _ => return Err(err(format!("filter $exists on \"{}\" takes true or false, not {}", short(field), kind(arg)))),
        },
        "$contains" => Op::Contains(arg.clone()),
        other => return Err(err(format!("unknown filter operator \"{}\" on \"{}\"", short(other), short(field)))),
    })
}

/// Whether `f` holds for the JSON document `doc`: the language's meaning, which the rendered
/// SQL follows (the tests compare the two).
pub fn holds(f: &Filter, doc: &Value) -> bool {
    match f {
        Filter::And(parts) => parts.iter().all(|p| holds(p, doc)),
        Filter::Or(parts) => parts.iter().any(|p| holds(p, doc)),
        Filter::Not(p) => !holds(p, doc),
        Filter::Field { path, op } => {
            let mut at = Some(doc);
            for label in path {
                at = match at {
                    Some(Value::Object(m)) => m.get(label),
                    Some(Value::Array(a)) => label.parse::<usize>().ok().and_then(|i| a.get(i)),
                    _ => None,
                };
            }
            op_holds(op, at)
        }
    }
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w))),
        _ => a == b,
    }
}

fn op_holds(op: &Op, at: Option<&Value>) -> bool {
    match op {
        Op::Eq(v) => at.is_some_and(|a| json_eq(a, v)),
        Op::Ne(v) => !at.is_some_and(|a| json_eq(a, v)),
        Op::Cmp(c, v) => match (at, v) {
            (Some(Value::Number(a)), Value::Number(b)) => {
                let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
                match c {
                    Cmp::Gt => a > b,
                    Cmp::Gte => a >= b,
                    Cmp::Lt => a < b,
                    Cmp::Lte => a <= b,
                }
            }
            (Some(Value::String(a)), Value::String(b)) => {
                let o = a.as_bytes().cmp(b.as_bytes());
                match c {
                    Cmp::Gt => o.is_gt(),
                    Cmp::Gte => o.is_ge(),
                    Cmp::Lt => o.is_lt(),
                    Cmp::Lte => o.is_le(),
                }
            }
            _ => false,
        },
        Op::In(vs) => at.is_some_and(|a| vs.iter().any(|v| json_eq(a, v))),
        Op::Nin(vs) => !at.is_some_and(|a| vs.iter().any(|v| json_eq(a, v))),
        Op::Exists(b) => at.is_some() == *b,
        Op::Contains(v) => match (at, v) {
            (Some(Value::Array(items)), _) => items.iter().any(|i| json_eq(i, v)),
            (Some(Value::String(s)), Value::String(sub)) => s.contains(sub.as_str()),
            _ => false,
        },
    }
}
