//! The values measured: JSON documents of orders, with the field names and
//! numbers a shop's API returns (the demo's orders, each with a customer,
//! an address and order lines), and an incompressible blob.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One order as an API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Order {
    id: u64,
    user_id: u64,
    status: String,
    amount_cents: u64,
    currency: String,
    created_at: String,
    note: String,
    shipping: Address,
    lines: Vec<Line>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Address {
    name: String,
    street: String,
    city: String,
    postcode: String,
    country: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Line {
    sku: String,
    product: String,
    quantity: u32,
    unit_price_cents: u64,
}

const STATUSES: [&str; 4] = ["paid", "shipped", "delivered", "refunded"];
const FIRST: [&str; 8] = [
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken",
];
const LAST: [&str; 8] = [
    "Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson",
];
const STREETS: [&str; 6] = [
    "Main Street",
    "Station Road",
    "Harbour Lane",
    "Mill Road",
    "Church Street",
    "Park Avenue",
];
const CITIES: [(&str, &str); 6] = [
    ("Lyon", "FR"),
    ("Leeds", "GB"),
    ("Utrecht", "NL"),
    ("Graz", "AT"),
    ("Porto", "PT"),
    ("Aarhus", "DK"),
];
const PRODUCTS: [&str; 10] = [
    "Espresso beans 1 kg",
    "Ceramic pour-over dripper",
    "Paper filters (100)",
    "Burr grinder",
    "Gooseneck kettle 1 l",
    "Milk frothing jug",
    "Cast iron skillet 28 cm",
    "Chef's knife 20 cm",
    "Linen tea towel",
    "Oak cutting board",
];

fn order(rng: &mut fastrand::Rng, id: u64) -> Order {
    let user_id = rng.u64(1..=50_000);
    let (city, country) = CITIES[rng.usize(..CITIES.len())];
    let lines: Vec<Line> = (0..rng.usize(1..=4))
        .map(|_| {
            let product = rng.usize(..PRODUCTS.len());
            Line {
                sku: format!("SKU-{:05}", product * 1000 + rng.usize(..1000)),
                product: PRODUCTS[product].to_owned(),
                quantity: rng.u32(1..=5),
                unit_price_cents: rng.u64(199..=24_999),
            }
        })
        .collect();
    Order {
        id,
        user_id,
        status: STATUSES[rng.usize(..STATUSES.len())].to_owned(),
        amount_cents: lines
            .iter()
            .map(|line| u64::from(line.quantity) * line.unit_price_cents)
            .sum(),
        currency: "EUR".to_owned(),
        created_at: format!(
            "2024-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            rng.u8(1..=12),
            rng.u8(1..=28),
            rng.u8(..24),
            rng.u8(..60),
            rng.u8(..60)
        ),
        note: format!("order {id} of user {user_id}"),
        shipping: Address {
            name: format!(
                "{} {}",
                FIRST[rng.usize(..FIRST.len())],
                LAST[rng.usize(..LAST.len())]
            ),
            street: format!(
                "{} {}",
                rng.u16(1..=240),
                STREETS[rng.usize(..STREETS.len())]
            ),
            city: city.to_owned(),
            postcode: format!("{:05}", rng.u32(1000..=99_999)),
            country: country.to_owned(),
        },
        lines,
    }
}

/// A user's orders whose JSON is about `bytes` long (the first order
/// past it included).
pub(crate) fn orders(bytes: usize, seed: u64) -> Vec<Order> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut orders = Vec::new();
    let mut len = 1;
    while len < bytes {
        let order = order(&mut rng, 100_000 + orders.len() as u64);
        len += serde_json::to_vec(&order).map_or(0, |json| json.len() + 1);
        orders.push(order);
    }
    orders
}

/// Bytes as they are (postcard writes them with a length, nothing more):
/// an image, an archive, an encrypted token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Blob(pub(crate) Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl serde::de::Visitor<'_> for Bytes {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes.to_vec()))
            }
        }
        deserializer.deserialize_bytes(Bytes)
    }
}

/// `len` random bytes: nothing compresses them.
pub(crate) fn blob(len: usize, seed: u64) -> Blob {
    let mut rng = fastrand::Rng::with_seed(seed);
    Blob((0..len).map(|_| rng.u8(..)).collect())
}
