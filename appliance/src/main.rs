//! The `basalt` binary.
fn main() {
    eprintln!("basalt: the appliance binary is being assembled; see appliance/README.md");
    std::process::exit(2);
}
