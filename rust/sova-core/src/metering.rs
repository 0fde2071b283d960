//! Rate metering: each VM's egress rate and mean packet size between two readings of its
//! cumulative counters, for every VM of one host (the agent) or of a fleet (the simulator)
//! at once.

use crate::waterfill::InputError;

/// The packet size assumed when no packet was sent between the readings (an Ethernet MTU).
pub const NO_PACKETS_BYTES: f64 = 1500.0;

/// Per flow: `valid` (neither counter went back), `bps` = 8·Δbytes / `dt`, `pkt` =
/// Δbytes / Δpackets (or [`NO_PACKETS_BYTES`] without packets). Counters are whole
/// numbers held as f64: below 2^53 every difference is exact, so these are the floats
/// the per-VM form computes from integers.
#[allow(clippy::too_many_arguments)] // four counter columns in, three columns out
pub fn measure(
    prev_tx: &[f64],
    prev_pk: &[f64],
    tx: &[f64],
    pk: &[f64],
    dt: f64,
    valid: &mut [bool],
    bps: &mut [f64],
    pkt: &mut [f64],
) -> Result<(), InputError> {
    let n = tx.len();
    for (name, len) in [
        ("prev_tx", prev_tx.len()),
        ("prev_pk", prev_pk.len()),
        ("pk", pk.len()),
        ("valid", valid.len()),
        ("bps", bps.len()),
        ("pkt", pkt.len()),
    ] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    for i in 0..n {
        let d_tx = tx[i] - prev_tx[i];
        let d_pk = pk[i] - prev_pk[i];
        valid[i] = d_tx >= 0.0 && d_pk >= 0.0;
        bps[i] = 8.0 * d_tx / dt;
        pkt[i] = if d_pk > 0.0 {
            d_tx / d_pk
        } else {
            NO_PACKETS_BYTES
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_between_readings() {
        // vm0: 1,250,000 B in 0.5 s = 20 Mbit/s over 1,000 packets of 1,250 B;
        // vm1: counters went back (a reset: not valid, and no packet size from -4
        // packets); vm2: bytes but no packets counted
        let (mut valid, mut bps, mut pkt) = ([false; 3], [0.0; 3], [0.0; 3]);
        measure(
            &[0.0, 500.0, 10.0],
            &[0.0, 5.0, 3.0],
            &[1_250_000.0, 100.0, 810.0],
            &[1000.0, 1.0, 3.0],
            0.5,
            &mut valid,
            &mut bps,
            &mut pkt,
        )
        .unwrap();
        assert_eq!(valid, [true, false, true]);
        assert_eq!(bps[0], 20e6);
        assert_eq!(pkt, [1250.0, NO_PACKETS_BYTES, NO_PACKETS_BYTES]);
        assert_eq!(bps[2], 8.0 * 800.0 / 0.5);
    }

    #[test]
    fn mismatched_columns_are_refused() {
        let (mut valid, mut bps, mut pkt) = ([false; 1], [0.0; 1], [0.0; 1]);
        let e = measure(
            &[0.0],
            &[0.0, 1.0],
            &[1.0],
            &[1.0],
            1.0,
            &mut valid,
            &mut bps,
            &mut pkt,
        );
        assert_eq!(e.unwrap_err().0, "prev_pk: 2 values for 1 VMs");
    }
}
