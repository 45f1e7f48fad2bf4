fn main() {
    memtrack::memory::return_large_frees();
    let cli = memtrack::cli::parse();
    if let Err(e) = memtrack::commands::run(cli) {
        // names in it are quoted where they are written; this keeps any text a file gave it
        // from acting on the terminal
        eprintln!("memtrack: {}", memtrack::quote::visible(&e.to_string()));
        std::process::exit(e.exit_code());
    }
}
