//! The `action-ledger` binary: parse, run, exit (see `cli`).

fn main() {
    // Unrelated variables that are not UTF-8 must not stop the tool; arguments must be UTF-8.
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mut args = Vec::new();
    for arg in std::env::args_os() {
        match arg.into_string() {
            Ok(a) => args.push(a),
            Err(bad) => {
                eprintln!(
                    "error: argument is not valid UTF-8: {}",
                    bad.to_string_lossy()
                );
                std::process::exit(2);
            }
        }
    }
    let code = action_ledger::run_process(args, &env);
    std::process::exit(code);
}
