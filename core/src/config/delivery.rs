//! The delivery keys every exporter has, declared once.

/// Declares an exporter's config struct with, after its own fields, the
/// delivery keys every exporter has: `timeout` (its default the function
/// named by `timeout_default`), `retry_on_failure` and `sending_queue`;
/// with `http`, also `headers` and `tls` (a client's TLS) of an HTTP
/// exporter. It gives the struct `delivery()` (what the topology delivers
/// with) and `delivery_errors()` (the keys' checks, with their paths). The
/// struct's own fields end with a comma.
///
/// ```ignore
/// causeway_core::exporter_config! {
///     /// `exporters.example`.
///     #[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
///     #[serde(deny_unknown_fields)]
///     pub struct ExampleConfig {
///         /// Where to send.
///         pub endpoint: String,
///     }
///     timeout_default = "timeout", http
/// }
/// ```
#[macro_export]
macro_rules! exporter_config {
    (
        $(#[$m:meta])*
        $vis:vis struct $name:ident { $($body:tt)* }
        timeout_default = $t:literal $(, $http:ident)?
    ) => {
        $crate::exporter_config!(@struct [$(#[$m])*] $vis $name [$($body)*] $t $($http)?);

        impl $name {
            /// What the topology delivers with: the timeout, retries and queue.
            pub fn delivery(&self) -> $crate::config::DeliveryConfig {
                $crate::config::DeliveryConfig {
                    timeout: self.timeout.get(),
                    retry: self.retry_on_failure,
                    queue: self.sending_queue.clone(),
                }
            }

            /// The delivery keys' errors, with their paths.
            pub fn delivery_errors(&self) -> Vec<$crate::config::ConfigError> {
                $crate::config::delivery_errors(
                    &self.retry_on_failure,
                    &self.sending_queue,
                    self.timeout,
                )
            }
        }
    };
    (@struct [$($m:tt)*] $vis:vis $name:ident [$($body:tt)*] $t:literal) => {
        $($m)*
        $vis struct $name {
            $($body)*
            /// Per-attempt timeout.
            #[serde(default = $t)]
            pub timeout: $crate::config::Duration,
            /// Retries of retryable failures (a refusal for load, 429, 5xx,
            /// a connection failure), backing off exponentially.
            #[serde(default)]
            pub retry_on_failure: $crate::config::RetryConfig,
            /// The bounded sending queue (in memory, or on disk with `storage`).
            #[serde(default)]
            pub sending_queue: $crate::config::QueueConfig,
        }
    };
    (@struct [$($m:tt)*] $vis:vis $name:ident [$($body:tt)*] $t:literal http) => {
        $crate::exporter_config!(@struct [$($m)*] $vis $name [
            $($body)*
            /// Extra headers sent with every request (e.g. `Authorization`;
            /// values are never logged).
            #[serde(default)]
            pub headers: $crate::__indexmap::IndexMap<String, $crate::tls::Secret>,
            /// TLS for https endpoints: `ca_file`, and `cert_file`/`key_file` for mTLS.
            #[serde(default)]
            pub tls: $crate::tls::ClientTls,
        ] $t);
    };
}
