use clap::Parser;

fn main() {
    let cli = memtrack::cli::Cli::parse();
    if let Err(e) = memtrack::commands::run(cli) {
        eprintln!("memtrack: {e}");
        std::process::exit(e.exit_code());
    }
}
