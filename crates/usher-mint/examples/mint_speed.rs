//! How fast entry tokens are minted on this machine:
//! `cargo run --release -p usher-mint --example mint_speed`.
use usher_mint::token::{Claims, SigningKey};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?;
    let n = 20_000u64;
    let t = std::time::Instant::now();
    let mut total = 0;
    for i in 0..n {
        let c = Claims {
            sub: i.to_string(),
            aud: "bench".into(),
            iat: 1_700_000_000,
            exp: 1_700_000_600,
            jti: format!("bench.{i}"),
        };
        total += key.mint(&c).len();
    }
    let per = t.elapsed().as_secs_f64() / n as f64 * 1e6;
    println!("{per:.1} µs per token ({n} tokens, {total} bytes)");
    Ok(())
}
