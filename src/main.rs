fn main() {
    memtrack::memory::return_large_frees();
    let cli = memtrack::cli::parse();
    if let Err(e) = memtrack::commands::run(cli) {
        eprintln!("memtrack: {e}");
        std::process::exit(e.exit_code());
    }
}
