//! Built-in rated endurance (TBW, terabytes written) of common SSD models, from vendor
//! datasheets. Matching is a case-insensitive substring test on the model name; the config's
//! `[tbw]` table takes precedence.

const TABLE: &[(&str, f64)] = &[
    ("Samsung SSD 970 EVO Plus 250GB", 150.0),
    ("Samsung SSD 970 EVO Plus 500GB", 300.0),
    ("Samsung SSD 970 EVO Plus 1TB", 600.0),
    ("Samsung SSD 970 EVO Plus 2TB", 1200.0),
    ("Samsung SSD 970 EVO 250GB", 150.0),
    ("Samsung SSD 970 EVO 500GB", 300.0),
    ("Samsung SSD 970 EVO 1TB", 600.0),
    ("Samsung SSD 980 PRO 500GB", 300.0),
    ("Samsung SSD 980 PRO 1TB", 600.0),
    ("Samsung SSD 980 PRO 2TB", 1200.0),
    ("Samsung SSD 990 PRO 1TB", 600.0),
    ("Samsung SSD 990 PRO 2TB", 1200.0),
    ("Samsung SSD 860 EVO 250GB", 150.0),
    ("Samsung SSD 860 EVO 500GB", 300.0),
    ("Samsung SSD 860 EVO 1TB", 600.0),
    ("Samsung SSD 870 EVO 500GB", 300.0),
    ("Samsung SSD 870 EVO 1TB", 600.0),
    ("SSD 850 PRO 128GB", 150.0),
    ("SSD 850 PRO 256GB", 150.0),
    ("CT250P2SSD8", 150.0),
    ("CT500P2SSD8", 150.0),
    ("CT1000P2SSD8", 300.0),
    ("CT500MX500SSD1", 180.0),
    ("CT1000MX500SSD1", 360.0),
    ("CT2000MX500SSD1", 700.0),
    ("INTEL SSDPEKNW010T8", 200.0),
    ("INTEL SSDPEKNW512G8", 100.0),
    ("Force MP510", 720.0),
    ("Sabrent Rocket 4.0 1TB", 700.0),
    ("KINGSTON SA400M8120G", 40.0),
    ("KINGSTON SA400S37120G", 40.0),
    ("KINGSTON SA400S37240G", 80.0),
    ("KINGSTON SA400S37480G", 160.0),
];

/// Rated TBW (terabytes) of a known model.
pub fn builtin_tbw_tb(model: &str) -> Option<f64> {
    let m = model.to_ascii_lowercase();
    TABLE
        .iter()
        .find(|(k, _)| m.contains(&k.to_ascii_lowercase()))
        .map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plus_models_do_not_match_the_non_plus_entry() {
        assert_eq!(
            builtin_tbw_tb("Samsung SSD 970 EVO Plus 250GB"),
            Some(150.0)
        );
        assert_eq!(builtin_tbw_tb("Samsung SSD 970 EVO 500GB"), Some(300.0));
        assert_eq!(builtin_tbw_tb("Unknown Drive"), None);
    }
}
