//! A synthetic Go service's profile dictionary, for the load generator and
//! the benches that send or join profiles.

use opentelemetry_proto::tonic::profiles::v1development::{
    Function, Line, Link, Location, ProfilesDictionary, Stack,
};

/// Functions in [`go_service_dictionary`].
pub const FUNCTIONS: i32 = 300;
/// Distinct stacks in [`go_service_dictionary`], each 30 frames deep.
pub const STACKS: i32 = 200;

/// A dictionary of `service`'s code: strings 1–3 are `cpu`, `nanoseconds`
/// and `delay` (the sample types); [`FUNCTIONS`] functions over 12
/// packages, one location each; [`STACKS`] stacks (index 1 onward) of 30
/// of them; link 0 empty, for the caller's links to follow.
pub fn go_service_dictionary(service: &str) -> ProfilesDictionary {
    let mut d = ProfilesDictionary {
        string_table: vec![
            String::new(),
            "cpu".into(),
            "nanoseconds".into(),
            "delay".into(),
        ],
        location_table: vec![Location::default()],
        function_table: vec![Function::default()],
        link_table: vec![Link::default()],
        stack_table: vec![Stack::default()],
        ..Default::default()
    };
    for f in 0..FUNCTIONS {
        d.string_table.push(format!(
            "github.com/acme/{service}/pkg{}.Handler{f}",
            f % 12
        ));
        d.string_table
            .push(format!("/src/{service}/pkg{}/handler.go", f % 12));
        d.function_table.push(Function {
            name_strindex: 4 + 2 * f,
            filename_strindex: 5 + 2 * f,
            ..Default::default()
        });
        d.location_table.push(Location {
            lines: vec![Line {
                function_index: 1 + f,
                line: i64::from(10 + f),
                column: 0,
            }],
            ..Default::default()
        });
    }
    for st in 0..STACKS {
        d.stack_table.push(Stack {
            location_indices: (0..30).map(|k| 1 + (st * 7 + k * 13) % FUNCTIONS).collect(),
        });
    }
    d
}
