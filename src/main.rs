fn main() {
    let cli = memtrack::cli::parse();
    if let Err(e) = memtrack::commands::run(cli) {
        eprintln!("memtrack: {e}");
        std::process::exit(e.exit_code());
    }
}
