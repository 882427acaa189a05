//! Per-tenant invalidation: every cached document carries its tenant's tag,
//! so one `invalidate_tag` drops all of a tenant's entries — in every
//! process sharing the store — without listing their keys.
//!
//! ```sh
//! cargo run -p corral-cache --example service_tenants
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use corral::{Cache, FillOptions};

/// Renders a tenant's document (the expensive part a cache saves).
async fn render(tenant: &str, doc: &str, renders: &AtomicUsize) -> Result<String, std::io::Error> {
    renders.fetch_add(1, Ordering::Relaxed);
    Ok(format!("<h1>{doc}</h1> for {tenant}"))
}

/// The read path: one tag per tenant on every entry.
async fn page(
    docs: &Cache<String>,
    renders: &Arc<AtomicUsize>,
    tenant: &str,
    doc: &str,
) -> Result<String, corral::Error<std::io::Error>> {
    let (renders, owned) = (Arc::clone(renders), (tenant.to_owned(), doc.to_owned()));
    docs.get_or_fill(&format!("{tenant}:{doc}"), move || async move {
        render(&owned.0, &owned.1, &renders).await
    })
    // Built only on a miss: a hit formats no tag.
    .options(|| FillOptions::new().tags([format!("tenant:{tenant}")]))
    .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs = Cache::<String>::builder("docs").build()?;
    let renders = Arc::new(AtomicUsize::new(0));
    for tenant in ["acme", "globex"] {
        for doc in ["home", "pricing"] {
            page(&docs, &renders, tenant, doc).await?;
        }
    }
    println!("rendered {}", renders.load(Ordering::Relaxed));

    // acme changed its branding: its pages are stale, globex's are not.
    docs.invalidate_tag("tenant:acme").await?;
    for tenant in ["acme", "globex"] {
        for doc in ["home", "pricing"] {
            page(&docs, &renders, tenant, doc).await?;
        }
    }
    println!(
        "rendered {} (acme's two pages again, globex's from the cache)",
        renders.load(Ordering::Relaxed)
    );
    Ok(())
}
