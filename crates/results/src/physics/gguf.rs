//! A reader for the header of a GGUF file (llama.cpp's model format, version 2 and 3): metadata
//! key/values and tensor infos, never the tensor data, so a 40 GB model is profiled in milliseconds.
//!
//! Layout (little-endian): magic "GGUF", u32 version, u64 tensor count, u64 KV count; each KV is a
//! string key, a u32 value type and the value; then per tensor a string name, u32 n_dims, u64 dims,
//! u32 ggml type and u64 offset. Strings are a u64 length and UTF-8 bytes.

use std::collections::BTreeMap;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;
use ttft_model::input_file::Limit;

/// Arrays longer than this (tokenizer vocabularies) are read past and kept as their length only.
const MAX_KEPT_ARRAY: u64 = 4096;
/// A string longer than this is taken for a corrupt file rather than allocated.
const MAX_STRING_BYTES: u64 = 64 << 20;

/// Why a GGUF header could not be read. Positions are byte offsets into the file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{}: {source}", path.display())]
    InFile { path: PathBuf, source: Box<GgufError> },
    #[error("not a GGUF file (magic {0:?}, expected \"GGUF\")")]
    Magic(Vec<u8>),
    #[error("GGUF version {0} is not supported (2 and 3 are)")]
    Version(u32),
    #[error("the header runs past its first {max} bytes, more than any model's (corrupt header?)")]
    HeaderTooLarge { max: u64 },
    #[error("truncated header at byte {at}: {source}")]
    Truncated { at: u64, source: io::Error },
    #[error("string of {len} bytes at byte {at} (corrupt header?)")]
    HugeString { len: u64, at: u64 },
    #[error("string before byte {0} is not UTF-8")]
    NotUtf8(u64),
    #[error("nested arrays are not supported")]
    NestedArray,
    #[error("unknown value type {value_type} at byte {at}")]
    ValueType { value_type: u32, at: u64 },
    #[error("key {key}: {source}")]
    Key { key: String, source: Box<GgufError> },
    #[error("tensor {name}: {n_dims} dimensions (corrupt header?)")]
    Dimensions { name: String, n_dims: u32 },
    #[error("tensor {name}: unknown ggml type {ggml_type}")]
    GgmlType { name: String, ggml_type: u32 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    pub offset: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    /// Every KV pair; long arrays appear as `{"array_len": n}`.
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
}

/// (elements per block, bytes per block) of a ggml tensor type; None for a type this reader does
/// not know (its bytes cannot be counted).
pub fn ggml_block(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        16 => (256, 66),  // IQ2_XXS
        17 => (256, 74),  // IQ2_XS
        18 => (256, 98),  // IQ3_XXS
        19 => (256, 50),  // IQ1_S
        20 => (32, 18),   // IQ4_NL
        21 => (256, 110), // IQ3_S
        22 => (256, 82),  // IQ2_S
        23 => (256, 136), // IQ4_XS
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        29 => (256, 56),  // IQ1_M
        30 => (1, 2),     // BF16
        34 => (256, 54),  // TQ1_0
        35 => (256, 66),  // TQ2_0
        39 => (32, 17),   // MXFP4
        _ => return None,
    })
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    pub fn n_bytes(&self) -> Result<u64, GgufError> {
        let (block, bytes) = ggml_block(self.ggml_type)
            .ok_or_else(|| GgufError::GgmlType { name: self.name.clone(), ggml_type: self.ggml_type })?;
        Ok(self.n_elements().div_ceil(block) * bytes)
    }
}

impl GgufHeader {
    /// `metadata[key]` as an unsigned integer.
    pub fn uint(&self, key: &str) -> Option<u64> {
        self.metadata.get(key).and_then(Value::as_u64)
    }

    pub fn string(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(Value::as_str)
    }
}

/// The header of the GGUF file `file` (a regular file opened from `path`), read from its start
/// and no further than `Limit::GGUF_HEADER`: a header that runs on past that is corrupt, not a
/// model to read to its end.
pub fn read_file(path: &Path, mut file: std::fs::File) -> Result<GgufHeader, GgufError> {
    let max = Limit::GGUF_HEADER.max_bytes;
    let in_file = |e| GgufError::InFile { path: path.to_path_buf(), source: Box::new(e) };
    io::Seek::rewind(&mut file).map_err(|source| in_file(GgufError::Truncated { at: 0, source }))?;
    read(BufReader::new(file.take(max))).map_err(|e| match e {
        GgufError::Truncated { at, .. } if at + 8 >= max => in_file(GgufError::HeaderTooLarge { max }),
        e => in_file(e),
    })
}

/// Reads a header from any byte source.
pub fn read<R: Read>(reader: R) -> Result<GgufHeader, GgufError> {
    let mut r = Reader { inner: reader, pos: 0 };
    let magic = r.bytes(4)?;
    if magic != b"GGUF" {
        return Err(GgufError::Magic(magic));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Version(version));
    }
    let tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string()?;
        let value_type = r.u32()?;
        let value = match r.value(value_type) {
            Ok(value) => value,
            Err(e) => return Err(GgufError::Key { key, source: Box::new(e) }),
        };
        metadata.insert(key, value);
    }
    let mut tensors = Vec::new();
    for _ in 0..tensor_count {
        let name = r.string()?;
        let n_dims = r.u32()?;
        if n_dims > 8 {
            return Err(GgufError::Dimensions { name, n_dims });
        }
        let dims = (0..n_dims).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        let ggml_type = r.u32()?;
        let offset = r.u64()?;
        tensors.push(TensorInfo { name, dims, ggml_type, offset });
    }
    Ok(GgufHeader { version, metadata, tensors })
}

struct Reader<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Reader<R> {
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, GgufError> {
        let mut buf = vec![0u8; n];
        self.inner.read_exact(&mut buf).map_err(|source| GgufError::Truncated { at: self.pos, source })?;
        self.pos += n as u64;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut buf = [0u8; N];
        self.inner.read_exact(&mut buf).map_err(|source| GgufError::Truncated { at: self.pos, source })?;
        self.pos += N as u64;
        Ok(buf)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let len = self.u64()?;
        if len > MAX_STRING_BYTES {
            return Err(GgufError::HugeString { len, at: self.pos });
        }
        let bytes = self.bytes(len as usize)?;
        String::from_utf8(bytes).map_err(|_| GgufError::NotUtf8(self.pos))
    }

    /// One value of GGUF type `t` (0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool,
    /// 8 string, 9 array, 10 u64, 11 i64, 12 f64).
    fn value(&mut self, t: u32) -> Result<Value, GgufError> {
        Ok(match t {
            0 => Value::from(u8::from_le_bytes(self.array()?)),
            1 => Value::from(i8::from_le_bytes(self.array()?)),
            2 => Value::from(u16::from_le_bytes(self.array()?)),
            3 => Value::from(i16::from_le_bytes(self.array()?)),
            4 => Value::from(self.u32()?),
            5 => Value::from(i32::from_le_bytes(self.array()?)),
            6 => Value::from(f32::from_le_bytes(self.array()?) as f64),
            7 => Value::from(u8::from_le_bytes(self.array::<1>()?) != 0),
            8 => Value::from(self.string()?),
            9 => {
                let item_type = self.u32()?;
                let len = self.u64()?;
                if item_type == 9 {
                    return Err(GgufError::NestedArray);
                }
                let keep = len <= MAX_KEPT_ARRAY;
                let mut items = Vec::new();
                for _ in 0..len {
                    let v = self.value(item_type)?;
                    if keep {
                        items.push(v);
                    }
                }
                if keep { Value::Array(items) } else { serde_json::json!({ "array_len": len }) }
            }
            10 => Value::from(self.u64()?),
            11 => Value::from(i64::from_le_bytes(self.array()?)),
            12 => Value::from(f64::from_le_bytes(self.array()?)),
            other => return Err(GgufError::ValueType { value_type: other, at: self.pos }),
        })
    }
}

/// A minimal GGUF writer for tests (ours and other modules').
#[cfg(test)]
pub mod testing {
    pub enum V<'a> {
        U32(u32),
        F32(f32),
        Bool(bool),
        Str(&'a str),
        ArrU32(&'a [u32]),
        ArrStr(&'a [&'a str]),
    }

    fn s(out: &mut Vec<u8>, text: &str) {
        out.extend((text.len() as u64).to_le_bytes());
        out.extend(text.as_bytes());
    }

    /// kvs: (key, value); tensors: (name, dims, ggml type).
    pub fn write(kvs: &[(&str, V)], tensors: &[(&str, &[u64], u32)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((tensors.len() as u64).to_le_bytes());
        out.extend((kvs.len() as u64).to_le_bytes());
        for (key, value) in kvs {
            s(&mut out, key);
            match value {
                V::U32(v) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                V::F32(v) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(v.to_le_bytes());
                }
                V::Bool(v) => {
                    out.extend(7u32.to_le_bytes());
                    out.push(u8::from(*v));
                }
                V::Str(v) => {
                    out.extend(8u32.to_le_bytes());
                    s(&mut out, v);
                }
                V::ArrU32(items) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(4u32.to_le_bytes());
                    out.extend((items.len() as u64).to_le_bytes());
                    items.iter().for_each(|v| out.extend(v.to_le_bytes()));
                }
                V::ArrStr(items) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((items.len() as u64).to_le_bytes());
                    items.iter().for_each(|v| s(&mut out, v));
                }
            }
        }
        let mut offset = 0u64;
        for (name, dims, t) in tensors {
            s(&mut out, name);
            out.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.to_le_bytes());
            out.extend(offset.to_le_bytes());
            offset += 32;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{V, write};
    use super::*;

    #[test]
    fn reads_every_value_kind_and_tensor_infos() {
        let vocab: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
        let vocab: Vec<&str> = vocab.iter().map(String::as_str).collect();
        let bytes = write(
            &[
                ("general.architecture", V::Str("llama")),
                ("llama.block_count", V::U32(2)),
                ("llama.rope.freq_base", V::F32(10000.0)),
                ("tokenizer.ggml.add_bos_token", V::Bool(true)),
                ("llama.attention.head_count_kv", V::ArrU32(&[2, 4])),
                ("tokenizer.ggml.tokens", V::ArrStr(&vocab)),
            ],
            &[("token_embd.weight", &[64, 100], 1), ("blk.0.attn_q.weight", &[64, 64], 8)],
        );
        let h = read(&bytes[..]).unwrap();
        assert_eq!(h.version, 3);
        assert_eq!(h.string("general.architecture"), Some("llama"));
        assert_eq!(h.uint("llama.block_count"), Some(2));
        assert_eq!(h.metadata["llama.rope.freq_base"], 10000.0);
        assert_eq!(h.metadata["tokenizer.ggml.add_bos_token"], true);
        assert_eq!(h.metadata["llama.attention.head_count_kv"], serde_json::json!([2, 4]));
        assert_eq!(h.metadata["tokenizer.ggml.tokens"], serde_json::json!({"array_len": 5000}));
        assert_eq!(h.tensors.len(), 2);
        assert_eq!(h.tensors[0].n_bytes().ok(), Some(64 * 100 * 2));
        // q8_0: 4096 elements = 128 blocks of 34 bytes.
        assert_eq!(h.tensors[1].n_bytes().ok(), Some(128 * 34));
    }

    #[test]
    fn quantised_block_sizes_match_ggml() {
        let t = |ty| TensorInfo { name: "t".into(), dims: vec![256, 4], ggml_type: ty, offset: 0 };
        assert_eq!(t(12).n_bytes().ok(), Some(4 * 144)); // q4_K
        assert_eq!(t(2).n_bytes().ok(), Some(32 * 18)); // q4_0
        assert_eq!(t(30).n_bytes().ok(), Some(1024 * 2)); // bf16
        assert!(t(99).n_bytes().unwrap_err().to_string().contains("unknown ggml type 99"));
    }

    #[test]
    fn bad_input_gives_clear_errors() {
        assert!(read(&b"GGML...."[..]).unwrap_err().to_string().contains("not a GGUF file"));
        let mut v4 = b"GGUF".to_vec();
        v4.extend(4u32.to_le_bytes());
        assert!(read(&v4[..]).unwrap_err().to_string().contains("version 4"));
        let good = write(&[("general.architecture", V::Str("llama"))], &[("a", &[4], 0)]);
        let cut = &good[..good.len() - 5];
        assert!(read(cut).unwrap_err().to_string().contains("truncated header"));
    }
}
