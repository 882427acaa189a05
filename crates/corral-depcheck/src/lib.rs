//! Builds only if corral, quick_cache with its default features and moka
//! can live in one application; its test uses all three.

/// Caches `key` in each of the three and returns what each holds.
pub async fn three_caches(key: &str, value: &str) -> [Option<String>; 3] {
    let corral = corral::Cache::<String>::builder("depcheck").build().ok();
    let from_corral = match &corral {
        Some(cache) => {
            let owned = value.to_owned();
            cache
                .get_or_fill(key, move || async move {
                    Ok::<_, std::convert::Infallible>(owned)
                })
                .await
                .ok()
        }
        None => None,
    };
    let quick = quick_cache::sync::Cache::<String, String>::new(16);
    quick.insert(key.to_owned(), value.to_owned());
    let moka = moka::future::Cache::<String, String>::new(16);
    moka.insert(key.to_owned(), value.to_owned()).await;
    [from_corral, quick.get(key), moka.get(key).await]
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "current_thread")]
    async fn corral_quick_cache_and_moka_in_one_application() {
        let held = super::three_caches("k", "v").await;
        assert_eq!(
            held,
            [
                Some("v".to_owned()),
                Some("v".to_owned()),
                Some("v".to_owned())
            ]
        );
    }
}
