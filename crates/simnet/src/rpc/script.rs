//! Scripts as Core describes them in RPC answers: `asm`, `type`, `address`, `desc`.

use primitives::bitcoin::{Address, Network, Script};

/// Core's `ScriptToAsmStr` without signature-hash decoding: pushes of up to four bytes as script
/// numbers, longer pushes as hex, opcodes by name, `[error]` where the script stops parsing.
pub(crate) fn asm(script: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < script.len() {
        if !out.is_empty() {
            out.push(' ');
        }
        let op = script[i];
        i += 1;
        let push_len = match op {
            0x00..=0x4b => Some(op as usize),
            0x4c..=0x4e => {
                let n = 1usize << (op - 0x4c); // size of the length field: 1, 2 or 4 bytes
                let Some(len_bytes) = script.get(i..i + n) else {
                    out.push_str("[error]");
                    return out;
                };
                i += n;
                let mut len = 0usize;
                for (k, b) in len_bytes.iter().enumerate() {
                    len |= (*b as usize) << (8 * k);
                }
                Some(len)
            }
            _ => None,
        };
        match push_len {
            Some(len) => {
                let Some(data) = i.checked_add(len).and_then(|end| script.get(i..end)) else {
                    out.push_str("[error]");
                    return out;
                };
                i += len;
                if data.len() <= 4 {
                    out.push_str(&script_num(data).to_string());
                } else {
                    out.push_str(&hex::encode(data));
                }
            }
            None => out.push_str(op_name(op)),
        }
    }
    out
}

/// A minimally or non-minimally encoded script number of up to four bytes (`CScriptNum`).
fn script_num(data: &[u8]) -> i64 {
    let Some(&last) = data.last() else {
        return 0;
    };
    let mut v: i64 = 0;
    for (k, b) in data.iter().enumerate() {
        v |= (*b as i64) << (8 * k);
    }
    if last & 0x80 != 0 {
        -(v & !(0x80i64 << (8 * (data.len() - 1))))
    } else {
        v
    }
}

/// Core's `GetOpName` for the non-push opcodes.
fn op_name(op: u8) -> &'static str {
    const NAMES: [&str; 0xbb - 0x4f] = [
        "-1",
        "OP_RESERVED",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        "8",
        "9",
        "10",
        "11",
        "12",
        "13",
        "14",
        "15",
        "16",
        "OP_NOP",
        "OP_VER",
        "OP_IF",
        "OP_NOTIF",
        "OP_VERIF",
        "OP_VERNOTIF",
        "OP_ELSE",
        "OP_ENDIF",
        "OP_VERIFY",
        "OP_RETURN",
        "OP_TOALTSTACK",
        "OP_FROMALTSTACK",
        "OP_2DROP",
        "OP_2DUP",
        "OP_3DUP",
        "OP_2OVER",
        "OP_2ROT",
        "OP_2SWAP",
        "OP_IFDUP",
        "OP_DEPTH",
        "OP_DROP",
        "OP_DUP",
        "OP_NIP",
        "OP_OVER",
        "OP_PICK",
        "OP_ROLL",
        "OP_ROT",
        "OP_SWAP",
        "OP_TUCK",
        "OP_CAT",
        "OP_SUBSTR",
        "OP_LEFT",
        "OP_RIGHT",
        "OP_SIZE",
        "OP_INVERT",
        "OP_AND",
        "OP_OR",
        "OP_XOR",
        "OP_EQUAL",
        "OP_EQUALVERIFY",
        "OP_RESERVED1",
        "OP_RESERVED2",
        "OP_1ADD",
        "OP_1SUB",
        "OP_2MUL",
        "OP_2DIV",
        "OP_NEGATE",
        "OP_ABS",
        "OP_NOT",
        "OP_0NOTEQUAL",
        "OP_ADD",
        "OP_SUB",
        "OP_MUL",
        "OP_DIV",
        "OP_MOD",
        "OP_LSHIFT",
        "OP_RSHIFT",
        "OP_BOOLAND",
        "OP_BOOLOR",
        "OP_NUMEQUAL",
        "OP_NUMEQUALVERIFY",
        "OP_NUMNOTEQUAL",
        "OP_LESSTHAN",
        "OP_GREATERTHAN",
        "OP_LESSTHANOREQUAL",
        "OP_GREATERTHANOREQUAL",
        "OP_MIN",
        "OP_MAX",
        "OP_WITHIN",
        "OP_RIPEMD160",
        "OP_SHA1",
        "OP_SHA256",
        "OP_HASH160",
        "OP_HASH256",
        "OP_CODESEPARATOR",
        "OP_CHECKSIG",
        "OP_CHECKSIGVERIFY",
        "OP_CHECKMULTISIG",
        "OP_CHECKMULTISIGVERIFY",
        "OP_NOP1",
        "OP_CHECKLOCKTIMEVERIFY",
        "OP_CHECKSEQUENCEVERIFY",
        "OP_NOP4",
        "OP_NOP5",
        "OP_NOP6",
        "OP_NOP7",
        "OP_NOP8",
        "OP_NOP9",
        "OP_NOP10",
        "OP_CHECKSIGADD",
    ];
    match op {
        0x4f..=0xba => NAMES[(op - 0x4f) as usize],
        _ => "OP_UNKNOWN",
    }
}

/// Core's output type names (`GetTxnOutputType`) for the templates its `Solver` recognises
/// (bare multisig is reported as `nonstandard`: simnet never makes one).
pub(crate) fn output_type(spk: &[u8]) -> &'static str {
    let s = Script::from_bytes(spk);
    if s.is_p2pkh() {
        "pubkeyhash"
    } else if s.is_p2sh() {
        "scripthash"
    } else if s.is_p2wpkh() {
        "witness_v0_keyhash"
    } else if s.is_p2wsh() {
        "witness_v0_scripthash"
    } else if s.is_p2tr() {
        "witness_v1_taproot"
    } else if spk == [0x51, 0x02, 0x4e, 0x73] {
        "anchor"
    } else if s.is_witness_program() {
        // Version 0 programs of any other length are not a known template.
        if s.witness_version().is_some_and(|v| v.to_num() != 0) {
            "witness_unknown"
        } else {
            "nonstandard"
        }
    } else if spk.first() == Some(&0x6a)
        && s.instructions().skip(1).all(|i| {
            i.is_ok_and(|i| {
                i.push_bytes().is_some() || i.opcode().is_some_and(|o| o.to_u8() <= 0x60)
            })
        })
    {
        "nulldata"
    } else if matches!(
        (spk.len(), spk.first(), spk.last()),
        (35, Some(0x21), Some(0xac)) | (67, Some(0x41), Some(0xac))
    ) {
        "pubkey"
    } else {
        "nonstandard"
    }
}

/// The regtest address paying to this script, if it has one.
pub(crate) fn address(spk: &[u8]) -> Option<String> {
    Address::from_script(Script::from_bytes(spk), Network::Regtest)
        .ok()
        .map(|a| a.to_string())
}

/// The descriptor Core infers for an output without wallet knowledge: `addr(..)` where the
/// script has an address, `raw(..)` otherwise, with its checksum.
pub(crate) fn descriptor(spk: &[u8]) -> String {
    let body = match address(spk) {
        Some(a) => format!("addr({a})"),
        None => format!("raw({})", hex::encode(spk)),
    };
    let sum = descriptor_checksum(&body).expect("addresses and hex are in the descriptor charset");
    format!("{body}#{sum}")
}

/// The eight-character checksum of BIP380 (output script descriptors).
pub(crate) fn descriptor_checksum(desc: &str) -> Option<String> {
    const INPUT_CHARSET: &str = "0123456789()[],'/*abcdefgh@:$%{}\
        IJKLMNOPQRSTUVWXYZ&+-.;<=>?!^_|~\
        ijklmnopqrstuvwxyzABCDEFGH`#\"\\ ";
    const CHECKSUM_CHARSET: &[u8] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";
    fn polymod(c: u64, val: u64) -> u64 {
        const GEN: [u64; 5] = [
            0xf5dee51989,
            0xa9fdca3312,
            0x1bab10e32d,
            0x3706b1677a,
            0x644d626ffd,
        ];
        let top = c >> 35;
        let mut c = ((c & 0x7_ffff_ffff) << 5) ^ val;
        for (i, g) in GEN.iter().enumerate() {
            if (top >> i) & 1 == 1 {
                c ^= g;
            }
        }
        c
    }
    let mut c = 1u64;
    let (mut cls, mut clscount) = (0u64, 0);
    for ch in desc.chars() {
        let pos = INPUT_CHARSET.find(ch)? as u64;
        c = polymod(c, pos & 31);
        cls = cls * 3 + (pos >> 5);
        clscount += 1;
        if clscount == 3 {
            c = polymod(c, cls);
            cls = 0;
            clscount = 0;
        }
    }
    if clscount > 0 {
        c = polymod(c, cls);
    }
    for _ in 0..8 {
        c = polymod(c, 0);
    }
    c ^= 1;
    Some(
        (0..8)
            .map(|j| CHECKSUM_CHARSET[((c >> (5 * (7 - j))) & 31) as usize] as char)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asm_matches_cores_rendering() {
        let p2wpkh = hex::decode("0014751e76e8199196d454941c45d1b3a323f1433bd6").unwrap();
        assert_eq!(asm(&p2wpkh), "0 751e76e8199196d454941c45d1b3a323f1433bd6");
        let p2pkh = hex::decode("76a91489abcdefabbaabbaabbaabbaabbaabbaabbaabba88ac").unwrap();
        assert_eq!(
            asm(&p2pkh),
            "OP_DUP OP_HASH160 89abcdefabbaabbaabbaabbaabbaabbaabbaabba OP_EQUALVERIFY OP_CHECKSIG"
        );
        // BIP34 height push 900,000 and small numbers read as script numbers.
        assert_eq!(
            asm(&[0x03, 0xa0, 0xbb, 0x0d, 0x51, 0x4f, 0x01, 0x81]),
            "900000 1 -1 -1"
        );
        assert_eq!(asm(&[0x6a, 0x24, 0xaa]), "OP_RETURN [error]");
        assert_eq!(asm(&[0xff]), "OP_UNKNOWN");
        assert_eq!(asm(&[]), "");
    }

    #[test]
    fn output_types_and_addresses() {
        let p2wpkh = hex::decode("0014751e76e8199196d454941c45d1b3a323f1433bd6").unwrap();
        assert_eq!(output_type(&p2wpkh), "witness_v0_keyhash");
        assert_eq!(
            address(&p2wpkh).unwrap(),
            "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"
        );
        let commitment = [&[0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed][..], &[7; 32]].concat();
        assert_eq!(output_type(&commitment), "nulldata");
        assert_eq!(address(&commitment), None);
        assert!(descriptor(&commitment).starts_with("raw(6a24aa21a9ed"));
        assert_eq!(output_type(&[0x51, 0x02, 0x4e, 0x73]), "anchor");
        assert_eq!(output_type(&[0xac]), "nonstandard");
    }

    #[test]
    fn descriptor_checksums_match_bip380() {
        // The examples of BIP380.
        assert_eq!(descriptor_checksum("raw(deadbeef)").unwrap(), "89f8spxm");
        assert_eq!(descriptor_checksum("raw(deadbeef)\u{e9}"), None);
    }
}
