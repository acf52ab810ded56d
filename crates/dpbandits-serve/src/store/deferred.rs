//! The statements a PostgreSQL batch defers ([`super::sql::Conn::defer`]), and how they are
//! sent: rows inserted into one table with the same columns become one multi-row `INSERT`.
//!
//! PostgreSQL parses and plans each statement of a batch's text on its own; with a batch's
//! writes sent as text in one round trip (docs/service.md, "A batch is one round trip"), that
//! work, about four statements per decision-and-reward pair, bounded the writer (docs/perf.md).
//! A batch's decision rows and audit entries are plain inserts, which commute with each other
//! and with every statement that does not touch their table: a row joins the latest insert
//! into its table with its columns when nothing deferred between them could see the
//! difference, and the batch's `N` decisions and `2N` audit entries cost two statements.
//!
//! What may pass what (nothing else moves: every other statement keeps its place):
//! * an insert passes an insert (any table): neither reads;
//! * an insert passes a single-row update of its table when they name different rows
//!   (`... WHERE experiment = ?1 AND id = ?2`, and the insert's columns begin with
//!   `experiment, id`): a reward's update of a decision stored by an earlier batch does not
//!   hold this batch's decision rows apart;
//! * an insert never passes a statement whose text names its table in any other way (an
//!   update of several rows, a delete, a function call: a statement this module does not
//!   understand is assumed to touch every table it names), nor one it cannot read at all.
//!
//! A statement that fails fails the batch however it was sent (the transaction is aborted:
//! [`super::sql::Conn::is_broken`]), so merging never hides an error; the order of the rows of
//! one table is kept.

/// One deferred statement, with what merging needs to know of it.
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    /// The whole statement (its arguments inlined).
    text: String,
    shape: Shape,
}

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// `INSERT INTO {table} ... VALUES (row)`: `text[..head]` is everything before the row.
    Insert {
        table: String,
        head: usize,
        key: Option<String>,
    },
    /// `UPDATE {table} SET ... WHERE experiment = ?1 AND id = ?2`: one row, named by `key`.
    RowUpdate { table: String, key: String },
    /// Anything else: it may touch any table its text names.
    Other,
}

/// The key of a row named by its first two arguments (`experiment`, `id`), as literals. Two
/// keys of one row are equal text when both statements bind the same types (the store binds
/// `experiment` as text and `id` as `i64` everywhere); were they not, an insert could pass an
/// update of its own row that came before it, which the store never defers (an update of a
/// decision follows its insert, and updates never move).
fn row_key(literals: &[String]) -> Option<String> {
    Some(format!("{}\u{0}{}", literals.first()?, literals.get(1)?))
}

impl Deferred {
    /// A statement the module does not read (raw text: `BEGIN`, the fence, several statements).
    pub(crate) fn other(text: String) -> Deferred {
        Deferred {
            text,
            shape: Shape::Other,
        }
    }

    /// A statement from its template (`?N` placeholders) and its arguments as literals, already
    /// inlined into `text`: an insert of one row, a single-row update, or another statement.
    pub(crate) fn from_template(template: &str, text: String, literals: &[String]) -> Deferred {
        let shape = shape_of(template, &text, literals).unwrap_or(Shape::Other);
        Deferred { text, shape }
    }
}

/// The shape of `template` (whose inlined form is `text`), when it is one this module reads.
fn shape_of(template: &str, text: &str, literals: &[String]) -> Option<Shape> {
    let t = template.trim();
    if let Some(rest) = t.strip_prefix("INSERT INTO ") {
        let table = rest.split([' ', '(']).next()?.to_string();
        let columns = rest[table.len()..].trim_start();
        let keyed = columns.strip_prefix('(').is_some_and(|c| {
            c.replace(char::is_whitespace, "")
                .starts_with("experiment,id,")
        });
        // The row: `VALUES (...)` to the end, one tuple, placeholders and constants only. The
        // head (everything before the tuple) holds no placeholder, so it is the same text in the
        // template and in the statement: it is found in the template, never in an argument.
        let values_at = template.find("VALUES")? + "VALUES".len();
        let head = values_at + template[values_at..].find('(')?;
        let values = template[head..].trim_end();
        let one_tuple = values.ends_with(')')
            && values[1..values.len() - 1]
                .chars()
                .all(|c| !matches!(c, '(' | ')' | '\''))
            && !values.to_ascii_uppercase().contains("SELECT")
            && template[values_at..head].trim().is_empty();
        if !one_tuple || table.is_empty() || text.get(..head) != template.get(..head) {
            return None;
        }
        let key = if keyed && values.replace(' ', "").starts_with("(?1,?2,") {
            row_key(literals)
        } else {
            None
        };
        // The text's row must be the rest of the text (the inlined tuple).
        if !text.trim_end().ends_with(')') {
            return None;
        }
        return Some(Shape::Insert { table, head, key });
    }
    if let Some(rest) = t.strip_prefix("UPDATE ") {
        let table = rest.split(' ').next()?.to_string();
        let where_ = " WHERE experiment = ?1 AND id = ?2";
        // No parenthesis: no subquery, no function call (it touches that row and nothing else).
        if t.ends_with(where_) && t.matches(" WHERE ").count() == 1 && !t.contains('(') {
            return Some(Shape::RowUpdate {
                table,
                key: row_key(literals)?,
            });
        }
    }
    None
}

/// A segment of the text sent: one statement, or a multi-row insert.
struct Segment<'a> {
    /// The statement, or the insert's head (everything before its rows).
    text: &'a str,
    shape: &'a Shape,
    /// An insert's rows (its first one included), in their order.
    rows: Vec<&'a str>,
}

/// Whether a row `(table, key)` inserted after `seg` may move before it.
fn passes(seg: &Segment<'_>, table: &str, key: Option<&str>) -> bool {
    match seg.shape {
        Shape::Insert { .. } => true,
        Shape::RowUpdate { table: t, key: k } => t != table || key.is_some_and(|key| key != k),
        Shape::Other => !seg.text.contains(table),
    }
}

/// The text that runs `statements` in order, each insert's row merged into the latest insert
/// into its table with its columns when it may pass every statement between them.
pub(crate) fn render(statements: &[Deferred]) -> String {
    let mut segs: Vec<Segment<'_>> = Vec::with_capacity(statements.len());
    for s in statements {
        if let Shape::Insert { table, head, key } = &s.shape {
            let (h, row) = s.text.split_at(*head);
            let mut into = None;
            for (i, seg) in segs.iter().enumerate().rev() {
                if matches!(seg.shape, Shape::Insert { .. }) && seg.text == h {
                    into = Some(i);
                    break;
                }
                if !passes(seg, table, key.as_deref()) {
                    break;
                }
            }
            match into {
                Some(i) => segs[i].rows.push(row),
                None => segs.push(Segment {
                    text: h,
                    shape: &s.shape,
                    rows: vec![row],
                }),
            }
        } else {
            segs.push(Segment {
                text: &s.text,
                shape: &s.shape,
                rows: vec![],
            });
        }
    }
    let mut out = String::new();
    for seg in &segs {
        out.push_str(seg.text);
        out.push_str(&seg.rows.join(", "));
        out.push_str("; ");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(template: &str, lits: &[&str]) -> Deferred {
        let lits: Vec<String> = lits.iter().map(|s| s.to_string()).collect();
        let mut text = template.to_string();
        for (i, l) in lits.iter().enumerate().rev() {
            text = text.replace(&format!("?{}", i + 1), l);
        }
        Deferred::from_template(template, text, &lits)
    }

    const DEC: &str = "INSERT INTO decisions (experiment, id, arm) VALUES (?1, ?2, ?3)";
    const AUD: &str = "INSERT INTO audit (seq, body) VALUES (?1, ?2)";
    const REW: &str = "UPDATE decisions SET reward = ?3 WHERE experiment = ?1 AND id = ?2";

    #[test]
    fn shapes_are_read_only_where_understood() {
        assert!(matches!(
            d(DEC, &["'e'", "1", "0"]).shape,
            Shape::Insert { key: Some(_), .. }
        ));
        assert!(matches!(
            d(AUD, &["1", "'x'"]).shape,
            Shape::Insert { key: None, .. }
        ));
        assert!(matches!(
            d(REW, &["'e'", "1", "0.5"]).shape,
            Shape::RowUpdate { .. }
        ));
        // Not one plain tuple, or a conflict clause: left alone.
        for t in [
            "INSERT INTO t (a) VALUES (?1) ON CONFLICT DO NOTHING",
            "INSERT INTO t (a) SELECT ?1",
            "INSERT INTO t (a) VALUES (?1), (?2)",
            "INSERT INTO t (a) VALUES (lower(?1))",
            "UPDATE decisions SET reward = ?3 WHERE experiment = ?1 AND id > ?2",
            "DELETE FROM decisions WHERE experiment = ?1 AND id = ?2",
        ] {
            assert_eq!(d(t, &["1", "2", "3"]).shape, Shape::Other, "{t}");
        }
    }

    /// A batch's decision rows and audit entries become one insert each, past the rewards'
    /// updates of other rows; everything else keeps its place.
    #[test]
    fn a_batch_of_pairs_becomes_a_few_statements() {
        let mut b = vec![
            Deferred::other("BEGIN".into()),
            Deferred::other("SELECT dpbandits_fence(1)".into()),
        ];
        for k in 1..=3 {
            b.push(d(DEC, &["'e'", &format!("{}", 10 + k), "0"]));
            b.push(d(AUD, &[&format!("{}", 2 * k), "'d'"]));
            b.push(d(REW, &["'e'", &format!("{k}"), "0.5"]));
            b.push(d(AUD, &[&format!("{}", 2 * k + 1), "'r'"]));
        }
        b.push(Deferred::other(
            "UPDATE experiments SET snapshot = 'x' WHERE name = 'e'".into(),
        ));
        assert_eq!(
            render(&b),
            "BEGIN; SELECT dpbandits_fence(1); \
             INSERT INTO decisions (experiment, id, arm) VALUES ('e', 11, 0), ('e', 12, 0), ('e', 13, 0); \
             INSERT INTO audit (seq, body) VALUES (2, 'd'), (3, 'r'), (4, 'd'), (5, 'r'), (6, 'd'), (7, 'r'); \
             UPDATE decisions SET reward = 0.5 WHERE experiment = 'e' AND id = 1; \
             UPDATE decisions SET reward = 0.5 WHERE experiment = 'e' AND id = 2; \
             UPDATE decisions SET reward = 0.5 WHERE experiment = 'e' AND id = 3; \
             UPDATE experiments SET snapshot = 'x' WHERE name = 'e'; "
        );
    }

    /// A row never moves before the update of its own row, before a statement that names its
    /// table otherwise, or before a statement that is not understood and names it.
    #[test]
    fn a_row_keeps_its_place_behind_what_touches_it() {
        let b = [
            d(DEC, &["'e'", "1", "0"]),
            d(REW, &["'e'", "2", "0.5"]),
            d(DEC, &["'e'", "2", "0"]),
        ];
        assert_eq!(
            render(&b),
            "INSERT INTO decisions (experiment, id, arm) VALUES ('e', 1, 0); \
             UPDATE decisions SET reward = 0.5 WHERE experiment = 'e' AND id = 2; \
             INSERT INTO decisions (experiment, id, arm) VALUES ('e', 2, 0); "
        );
        let b = [
            d(AUD, &["1", "'a'"]),
            Deferred::other("DELETE FROM audit WHERE seq = 1".into()),
            d(AUD, &["1", "'b'"]),
        ];
        assert_eq!(
            render(&b),
            "INSERT INTO audit (seq, body) VALUES (1, 'a'); DELETE FROM audit WHERE seq = 1; \
             INSERT INTO audit (seq, body) VALUES (1, 'b'); "
        );
        // Another table's statement does not hold a row back; other columns are another insert.
        let b = [
            d(AUD, &["1", "'a'"]),
            Deferred::other("UPDATE ledger SET status = 'charged' WHERE id = 4".into()),
            d("INSERT INTO audit (seq) VALUES (?1)", &["2"]),
            d(AUD, &["3", "'c'"]),
        ];
        assert_eq!(
            render(&b),
            "INSERT INTO audit (seq, body) VALUES (1, 'a'), (3, 'c'); \
             UPDATE ledger SET status = 'charged' WHERE id = 4; INSERT INTO audit (seq) VALUES (2); "
        );
    }
}
