//! Little-endian fields of a zip record, read in order from a slice already cut to the
//! record's length, so no read can run past it.

/// A cursor over one record.
pub(super) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(record: &'a [u8]) -> Self {
        Fields { rest: record }
    }

    /// The next `N` bytes; zeros once the record is used up (callers cut it long enough).
    fn take<const N: usize>(&mut self) -> [u8; N] {
        match self.rest.split_first_chunk::<N>() {
            Some((head, rest)) => {
                self.rest = rest;
                *head
            }
            None => [0; N],
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    /// The next four bytes, as a signature.
    pub fn sig(&mut self) -> [u8; 4] {
        self.take()
    }
}

/// What local and central headers share, in the order both hold it (after their version
/// fields): flags, method, time, date, CRC, sizes, name and extra lengths.
pub(super) struct Shared {
    pub flags: u16,
    pub method: u16,
    pub crc: u32,
    pub compressed: u32,
    pub size: u32,
    pub name_len: u64,
    pub extra_len: u64,
}

impl Fields<'_> {
    pub fn shared(&mut self) -> Shared {
        let flags = self.u16();
        let method = self.u16();
        let _time = self.u16();
        let _date = self.u16();
        Shared {
            flags,
            method,
            crc: self.u32(),
            compressed: self.u32(),
            size: self.u32(),
            name_len: self.u16().into(),
            extra_len: self.u16().into(),
        }
    }
}

/// The data of every zip64 field (id 1) in an extra field, which must be well-formed.
pub(super) fn zip64_fields(extra: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    const ZIP64_EXTRA: u16 = 0x0001;
    let mut found = Vec::new();
    let mut rest = extra;
    while !rest.is_empty() {
        let (head, tail) = rest
            .split_first_chunk::<4>()
            .ok_or("its extra field is cut short")?;
        let mut f = Fields::new(head);
        let (id, len) = (f.u16(), usize::from(f.u16()));
        let (data, tail) = tail
            .split_at_checked(len)
            .ok_or("its extra field is cut short")?;
        if id == ZIP64_EXTRA {
            found.push(data);
        }
        rest = tail;
    }
    Ok(found)
}
