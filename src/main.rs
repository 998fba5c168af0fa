//! The `action-ledger` binary: parse, run, exit (see `cli`).

fn main() {
    let env = action_ledger::cli::process_env();
    let code = action_ledger::cli::run(
        std::env::args(),
        &env,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
