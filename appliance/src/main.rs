//! `basalt`: run, mount, serve, inspect, check and repair a Basalt store.
fn main() {
    std::process::exit(basalt_appliance::main_entry());
}
