//! `tensorplay convert IN OUT.safetensors`: a checkpoint rewritten as safetensors without
//! executing it, verified tensor by tensor before it is put in place.

use crate::exit::ExitStatus;
use clap::Args;
use std::path::PathBuf;
use tensorplay_audit::text::{human_bytes, plural, printable};
use tensorplay_convert::{to_safetensors, ConvertError, ConvertOptions};
use tensorplay_engine::{load, DType};

/// Names of left-out values the summary lists before counting the rest.
const MAX_SHOWN: usize = 20;

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The checkpoint to convert (any format tensorplay reads).
    input: PathBuf,
    /// The safetensors file to write (replaced only once the conversion is verified).
    output: PathBuf,
    /// A global (`module.name`) the input may reference; repeat for each. Nothing is
    /// executed either way: this only accepts that the file names it.
    #[arg(long, value_name = "NAME")]
    allow_global: Vec<String>,
    /// Write tensors holding NaN or ±Inf instead of refusing the conversion.
    #[arg(long)]
    allow_nonfinite: bool,
    /// Split the output into shards of at most SIZE of tensor bytes (e.g. 5GB), named
    /// NAME-00001-of-0000N.safetensors with NAME.safetensors.index.json, as transformers
    /// writes them.
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    max_shard_size: Option<u64>,
    /// Cast every floating-point tensor to DTYPE as `Tensor.to(dtype)` does (float16,
    /// bfloat16, float32 or float64; also half, float, double); integer and boolean tensors
    /// are written as they are. Values that overflow DTYPE refuse the conversion unless
    /// --allow-nonfinite.
    #[arg(long, value_name = "DTYPE", value_parser = parse_float_dtype)]
    dtype: Option<DType>,
    /// Where the tensors go: only `cpu`, as safetensors holds host bytes (recorded devices
    /// such as cuda:1 are always mapped to it); accepted for `torch.load` habits.
    #[arg(long, value_name = "DEVICE", value_parser = ["cpu"], default_value = "cpu")]
    map_location: String,
}

/// PyTorch's names of the floating-point dtypes a conversion writes.
fn parse_float_dtype(text: &str) -> Result<DType, String> {
    let name = match text {
        "half" => "float16",
        "float" => "float32",
        "double" => "float64",
        other => other.strip_prefix("torch.").unwrap_or(other),
    };
    DType::from_name(name)
        .filter(|d| tensorplay_convert::cast::casts(*d))
        .ok_or_else(|| format!("expected float16, bfloat16, float32 or float64, not '{text}'"))
}

pub fn run(args: &ConvertArgs) -> anyhow::Result<ExitStatus> {
    let input = load::open(&args.input)?;
    let options = ConvertOptions {
        allow_globals: args.allow_global.clone(),
        allow_nonfinite: args.allow_nonfinite,
        max_shard_size: args.max_shard_size,
        dtype: args.dtype,
    };
    let converted = match to_safetensors(&input, &args.output, &options) {
        Ok(c) => c,
        // The input is what it is: refusing it is a verdict on the file (exit 1), not a
        // failure to judge it.
        Err(
            e @ (ConvertError::UnsafeGlobals { .. }
            | ConvertError::NonFinite { .. }
            | ConvertError::Overflow { .. }),
        ) => {
            eprintln!("error: {}", printable(&e.to_string(), false));
            return Ok(ExitStatus::Findings);
        }
        Err(e) => return Err(e.into()),
    };
    let mut notes = Vec::new();
    if !converted.aliases.is_empty() {
        notes.push(format!(
            "{} written once (recorded in __metadata__)",
            plural(converted.aliases.len(), "tied name")
        ));
    }
    if !converted.cloned.is_empty() {
        notes.push(format!(
            "{} cloned into {} own record",
            plural(converted.cloned.len(), "view"),
            if converted.cloned.len() == 1 {
                "its"
            } else {
                "their"
            }
        ));
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("; {}", notes.join(", "))
    };
    let target = match converted.files.as_slice() {
        [one] => one.display().to_string(),
        files => format!(
            "{} and {}",
            plural(files.len() - 1, "shard"),
            files
                .last()
                .map(|f| f.display().to_string())
                .unwrap_or_default()
        ),
    };
    let mut text = format!(
        "wrote {}: {}, {}{notes}; every tensor verified against {}\n",
        printable(&target, false),
        plural(converted.written.len(), "tensor"),
        human_bytes(converted.bytes),
        printable(&args.input.display().to_string(), false),
    );
    // Never silently: training state (epoch, optimizer settings) has no place in safetensors.
    let left_out = &input.left_out;
    if left_out.count > 0 {
        let shown: Vec<String> = left_out
            .names
            .iter()
            .take(MAX_SHOWN)
            .map(|n| printable(n, false))
            .collect();
        let more = left_out.count.saturating_sub(shown.len());
        text.push_str(&format!(
            "left out {} holding no tensor (safetensors holds tensors only): {}{}\n",
            plural(left_out.count, "value"),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    let outside = &converted.outside_state_dict;
    if !outside.is_empty() {
        let shown: Vec<String> = outside
            .iter()
            .take(MAX_SHOWN)
            .map(|(n, held)| format!("{} ({})", printable(n, false), held.name()))
            .collect();
        let more = outside.len().saturating_sub(shown.len());
        text.push_str(&format!(
            "left out {} the TorchScript module's state_dict() does not list: {}{}\n",
            plural(outside.len(), "tensor"),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    crate::exit::print(&text)?;
    Ok(ExitStatus::Success)
}
