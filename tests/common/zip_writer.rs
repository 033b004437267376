//! A zip writer for tests that build archives: stored members, the central directory, and
//! zip64 end records when the count needs them.

/// CRC-32 (IEEE), bit by bit: the members are tiny.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Stored members, the central directory, and zip64 end records when the count needs them:
/// the layout `torch.save`'s writer produces, minus its alignment padding.
#[derive(Default)]
pub struct ZipWriter {
    out: Vec<u8>,
    central: Vec<u8>,
    count: u64,
}

impl ZipWriter {
    pub fn add(&mut self, name: &str, data: &[u8]) {
        let offset = u32::try_from(self.out.len()).expect("small archive");
        let (crc, len) = (crc32(data), u32::try_from(data.len()).expect("small"));
        let name_len = u16::try_from(name.len()).expect("short name");
        // Version 20, no flags, stored, 1980-01-01 00:00.
        let common = |out: &mut Vec<u8>| {
            for v in [0u16, 0, 0, 0x21] {
                out.extend(v.to_le_bytes());
            }
            for v in [crc, len, len] {
                out.extend(v.to_le_bytes());
            }
            out.extend(name_len.to_le_bytes());
            out.extend(0u16.to_le_bytes());
        };
        self.out.extend(b"PK\x03\x04");
        self.out.extend(20u16.to_le_bytes());
        common(&mut self.out);
        self.out.extend(name.as_bytes());
        self.out.extend(data);

        self.central.extend(b"PK\x01\x02");
        self.central.extend(20u16.to_le_bytes());
        self.central.extend(20u16.to_le_bytes());
        common(&mut self.central);
        // Comment length, disk, internal and external attributes, local header offset.
        for v in [0u16, 0, 0] {
            self.central.extend(v.to_le_bytes());
        }
        self.central.extend(0u32.to_le_bytes());
        self.central.extend(offset.to_le_bytes());
        self.central.extend(name.as_bytes());
        self.count += 1;
    }

    pub fn finish(mut self) -> Vec<u8> {
        let cd_offset = self.out.len() as u64;
        let cd_size = self.central.len() as u64;
        self.out.append(&mut self.central);
        let count16 = u16::try_from(self.count).unwrap_or(0xFFFF);
        if count16 == 0xFFFF {
            let record = self.out.len() as u64;
            self.out.extend(b"PK\x06\x06");
            self.out.extend(44u64.to_le_bytes());
            self.out.extend(45u16.to_le_bytes());
            self.out.extend(45u16.to_le_bytes());
            self.out.extend(0u32.to_le_bytes());
            self.out.extend(0u32.to_le_bytes());
            for v in [self.count, self.count, cd_size, cd_offset] {
                self.out.extend(v.to_le_bytes());
            }
            self.out.extend(b"PK\x06\x07");
            self.out.extend(0u32.to_le_bytes());
            self.out.extend(record.to_le_bytes());
            self.out.extend(1u32.to_le_bytes());
        }
        self.out.extend(b"PK\x05\x06");
        for v in [0u16, 0, count16, count16] {
            self.out.extend(v.to_le_bytes());
        }
        let cd_size32 = u32::try_from(cd_size).expect("under 4 GiB");
        let cd_offset32 = u32::try_from(cd_offset).expect("under 4 GiB");
        self.out.extend(cd_size32.to_le_bytes());
        self.out.extend(cd_offset32.to_le_bytes());
        self.out.extend(0u16.to_le_bytes());
        self.out
    }
}
