//! What a reloaded config file may change while the process runs.
//!
//! A reload compares the running effective settings with the new ones key
//! by key (top-level keys of the file, overrides applied). Keys that only
//! shape how a request is measured take effect for requests that start
//! afterwards; every other key (listeners, upstream, timeouts, pool,
//! threads, buckets, `otel`…) is baked into a socket, a client, a running
//! exporter or a registered metric family and keeps its running value
//! until a restart. A key added to [`File`] later is restart-only until it
//! is listed in [`LIVE`].

use std::collections::BTreeSet;

use toml::{Table, Value};

use super::{Config, ConfigError, File};
use crate::measure::slo::REQUEST_SLO;

/// Keys a reload applies live, to requests that start afterwards.
pub(crate) const LIVE: [&str; 14] = [
    "log_filter",
    "max_event_bytes",
    "request_capture_bytes",
    "dialects",
    "max_models",
    "models",
    "template_opens_reasoning",
    "max_label_value_bytes",
    "slo_headers",
    "request_id_headers",
    "labels",
    "slo",
    "workload",
    "records",
];

/// A validated reload: the settings to run with and what changed.
#[derive(Debug)]
pub(crate) struct Reload {
    /// The new effective file, restart-only keys kept at their running values.
    pub file: File,
    /// The configuration built from `file`.
    pub config: Config,
    /// Keys whose new value is in force from now on.
    pub applied: Vec<String>,
    /// Keys whose new value needs a restart; their running value stays.
    pub needs_restart: Vec<String>,
}

/// Plans a reload from the running effective file to `new`, which has been
/// validated on its own (so a bad file is refused before anything else).
pub(crate) fn plan(running: &File, new: File) -> Result<Reload, ConfigError> {
    let running_table = table(running)?;
    let mut merged = table(&new)?;
    let mut keys: Vec<String> = running_table.keys().chain(merged.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let (mut applied, mut needs_restart) = (Vec::new(), Vec::new());
    for key in keys {
        let (old, now) = (running_table.get(&key), merged.get(&key));
        if old == now {
            continue;
        }
        if is_live(&key, old, now) {
            applied.push(key);
            continue;
        }
        match old {
            Some(old) => merged.insert(key.clone(), old.clone()),
            None => merged.remove(&key),
        };
        needs_restart.push(key);
    }
    let file: File = merged
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::invalid(".", e.message().trim()))?;
    let config = file.clone().validate()?;
    Ok(Reload {
        file,
        config,
        applied,
        needs_restart,
    })
}

/// Checks `config`'s SLO names against every name whose series exist
/// (`registered`): as within one file, a name that is the start of another
/// could make two series one (see `metrics::labels`).
pub(crate) fn check_slo_names(
    config: &Config,
    registered: &BTreeSet<String>,
) -> Result<(), ConfigError> {
    for (i, slo) in config.export.slos.iter().enumerate() {
        let name = slo.name.as_str();
        let clash = registered.iter().map(String::as_str).find(|other| {
            *other != name
                && *other != REQUEST_SLO
                && (other.starts_with(name) || name.starts_with(other))
        });
        if let Some(other) = clash {
            let message = format!(
                "`{name}` and `{other}`, an SLO name in use since start, start alike; rename it or restart"
            );
            return Err(ConfigError::invalid(&format!("slo[{i}].name"), message));
        }
    }
    Ok(())
}

/// Whether a changed key can take effect live. Extra labels can change
/// their headers live, but not their names: the names are part of every
/// registered family.
fn is_live(key: &str, old: Option<&Value>, new: Option<&Value>) -> bool {
    match key {
        "labels" => label_names(old) == label_names(new),
        key => LIVE.contains(&key),
    }
}

fn label_names(labels: Option<&Value>) -> Vec<Option<&Value>> {
    labels
        .and_then(Value::as_array)
        .map(|labels| labels.iter().map(|l| l.get("name")).collect())
        .unwrap_or_default()
}

fn table(file: &File) -> Result<Table, ConfigError> {
    Table::try_from(file).map_err(|e| ConfigError::invalid(".", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> File {
        let text = format!("upstream = \"http://127.0.0.1:8000\"\n{text}");
        File::parse(&text, "test.toml").expect("test file parses")
    }

    #[test]
    fn live_keys_apply_and_restart_keys_keep_their_running_value() {
        let running = file("listen = \"127.0.0.1:7000\"\nmax_models = 4\n");
        let new = file(concat!(
            "listen = \"127.0.0.1:7001\"\nmax_models = 8\nidle_timeout = \"9s\"\n",
            "[[slo]]\nname = \"chat\"\nttft = \"1s\"\n",
        ));
        let reload = plan(&running, new).expect("valid reload");
        assert_eq!(reload.applied, ["max_models", "slo"]);
        assert_eq!(reload.needs_restart, ["idle_timeout", "listen"]);
        assert_eq!(reload.config.listen.to_string(), "127.0.0.1:7000");
        assert_eq!(reload.config.timeouts.idle, None);
        assert_eq!(reload.config.export.max_values, 8);
        assert_eq!(reload.config.export.slos.len(), 1);
    }

    #[test]
    fn label_headers_reload_but_label_names_need_a_restart() {
        let running = file("[[labels]]\nname = \"tenant\"\nheader = \"x-tenant\"\n");
        let header = file("[[labels]]\nname = \"tenant\"\nheader = \"x-org\"\n");
        let reload = plan(&running, header).expect("valid reload");
        assert_eq!(reload.applied, ["labels"]);
        assert_eq!(reload.config.export.labels[0].header.as_str(), "x-org");

        let renamed = file("[[labels]]\nname = \"team\"\nheader = \"x-team\"\n");
        let reload = plan(&running, renamed).expect("valid reload");
        assert_eq!(reload.needs_restart, ["labels"]);
        assert_eq!(reload.config.export.labels[0].name, "tenant");
        assert!(plan(&running, file("")).expect("valid").applied.is_empty());
    }

    #[test]
    fn otel_needs_a_restart_and_keeps_its_running_value() {
        let otel =
            |ratio: f64| format!("[otel]\nendpoint = \"http://c:4318\"\nsample_ratio = {ratio}\n");
        let reload = plan(&file(&otel(0.5)), file(&otel(0.1))).expect("valid reload");
        assert_eq!(reload.needs_restart, ["otel"]);
        assert_eq!(reload.config.otel.expect("kept").sample_ratio, 0.5);
        let reload = plan(&file(""), file(&otel(1.0))).expect("valid reload");
        assert_eq!(reload.needs_restart, ["otel"]);
        assert!(reload.config.otel.is_none(), "not started by a reload");
    }

    #[test]
    fn a_new_slo_name_may_not_start_like_one_in_use() {
        let slo = |name: &str| format!("[[slo]]\nname = \"{name}\"\nttft = \"1s\"\n");
        let used = BTreeSet::from(["chat".to_owned()]);
        let config = |text: &str| file(text).validate().expect("valid");
        let e = check_slo_names(&config(&slo("chatty")), &used).expect_err("clash");
        assert!(e.to_string().starts_with("slo[0].name: "), "{e}");
        assert!(check_slo_names(&config(&slo("chat")), &used).is_ok());
        assert!(check_slo_names(&config(&slo("batch")), &used).is_ok());
    }

    #[test]
    fn the_upstream_health_check_needs_a_restart() {
        let running = file("");
        let new = file("upstream_health_path = \"/health\"\nupstream_health_timeout = \"2s\"\n");
        let reload = plan(&running, new).expect("valid reload");
        assert!(reload.applied.is_empty());
        assert_eq!(
            reload.needs_restart,
            ["upstream_health_path", "upstream_health_timeout"]
        );
        assert!(reload.config.upstream_health.path.is_none());
    }

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let running = file("[buckets]\nevent_tokens = [1.0, 2.0]\n");
        let reload = plan(&running, running.clone()).expect("valid reload");
        assert!(reload.applied.is_empty() && reload.needs_restart.is_empty());
    }
}
