//! Where readers put what they read: one checkpoint under construction, the read's memory
//! account, and the [`Scope`] a nested reading writes under. Storage ids are chosen here and
//! nowhere else; names, keys and members get their scope as they are added, never patched
//! after.

use super::limits::{Meter, ReadLimits};
use crate::chat_template::ChatTemplate;
use crate::keras::KerasModel;
use crate::pickle::weights_only::set_storage;
use crate::torchscript_code::TorchScriptCode;
use crate::unsafe_global::UnsafeGlobal;
use crate::{
    Checkpoint, ChunkedTensor, CompositeTensor, DType, DataPtr, Format, HeldAs, LeftOut, Storage,
    StorageId, Tensor, TensorImpl, WeightsOnly,
};
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// What a read has gathered so far.
#[derive(Debug, Default)]
struct Gathered {
    tensors: Vec<Tensor>,
    composites: Vec<CompositeTensor>,
    storages: Vec<Arc<Storage>>,
    unsafe_globals: Vec<UnsafeGlobal>,
    metadata: BTreeMap<String, String>,
    chat_templates: Vec<ChatTemplate>,
    keras: Option<KerasModel>,
    torchscript: Option<TorchScriptCode>,
    chunked: Vec<ChunkedTensor>,
    /// What `torch.load` would do with the files read so far.
    weights_only: Option<WeightsOnly>,
    left_out: LeftOut,
}

/// Where what a nested reading adds goes in the checkpoint that holds it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// Prepended to storage keys: two archives of one file both number theirs from 0.
    keys: String,
    /// Applied to tensor names, innermost first.
    names: Vec<Rename>,
    /// The members holding what is read, innermost first: a global is named under them.
    members: Vec<String>,
    /// What every tensor read is held as, where the reader does not say.
    held_as: Option<HeldAs>,
    /// How many nested archives (a pickle's byte strings read as checkpoints) enclose it.
    archives: usize,
}

#[derive(Debug, Clone)]
enum Rename {
    /// `prefix` + name.
    Prefix(String),
    /// The object saved whole (`ROOT_NAME`) is `fqn`, anything in it `fqn.<name>`.
    Under(String),
}

impl Rename {
    fn apply(&self, name: &str) -> String {
        match self {
            Rename::Prefix(prefix) => format!("{prefix}{name}"),
            Rename::Under(fqn) if name == super::ROOT_NAME => fqn.clone(),
            Rename::Under(fqn) => format!("{fqn}.{name}"),
        }
    }
}

impl Scope {
    /// Storage keys get `prefix` in front.
    pub fn keys(mut self, prefix: impl Into<String>) -> Self {
        self.keys = prefix.into();
        self
    }

    /// Tensor names get `prefix` in front.
    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        if !prefix.is_empty() {
            self.names.push(Rename::Prefix(prefix));
        }
        self
    }

    /// The object read is named `fqn`; what it holds, `fqn.<name>`.
    pub fn under(mut self, fqn: impl Into<String>) -> Self {
        self.names.push(Rename::Under(fqn.into()));
        self
    }

    /// Globals are named under `member`, the part of the file the reading took its bytes from.
    pub fn member(mut self, member: impl Into<String>) -> Self {
        self.members.push(member.into());
        self
    }

    /// Tensors read are held as `held_as` (TorchScript's constants).
    pub fn held_as(mut self, held_as: HeldAs) -> Self {
        self.held_as = Some(held_as);
        self
    }

    /// What is read is a nested archive, one deeper than this scope.
    pub fn archive(mut self) -> Self {
        self.archives += 1;
        self
    }

    /// `inner` seen from this scope: its keys, names and members, then this scope's.
    fn around(&self, mut inner: Scope) -> Scope {
        inner.archives += self.archives;
        inner.keys.insert_str(0, &self.keys);
        inner.names.extend(self.names.iter().cloned());
        inner.members.extend(self.members.iter().cloned());
        inner.held_as = inner.held_as.or(self.held_as);
        inner
    }

    fn name(&self, name: impl Into<Arc<str>>) -> Arc<str> {
        let name = name.into();
        if self.names.is_empty() {
            return name;
        }
        let mut renamed = name.to_string();
        for rename in &self.names {
            renamed = rename.apply(&renamed);
        }
        renamed.into()
    }

    fn global(&self, mut global: UnsafeGlobal) -> UnsafeGlobal {
        for member in &self.members {
            global.nest_under(member);
        }
        global
    }
}

/// A storage as a reader describes it; the sink numbers it.
pub(crate) struct NewStorage {
    pub key: Arc<str>,
    pub dtype: DType,
    pub nbytes: u64,
    /// Borrowed where it is a common spelling (`cpu`): a million storages make no string.
    pub location: Cow<'static, str>,
    pub data_ptr: DataPtr,
    /// The file holds it as an object of its own, not only through tensors.
    pub saved_alone: bool,
}

/// Where a reader writes: the checkpoint being gathered, the read's memory account, and the
/// scope of this reading.
pub(crate) struct Sink<'a> {
    out: &'a mut Gathered,
    meter: &'a Meter,
    scope: Scope,
}

/// Runs `read` over one sink within `limits` and makes the checkpoint of what it added: the
/// only way a read becomes a [`Checkpoint`].
pub(crate) fn gather(
    path: &Path,
    limits: ReadLimits,
    read: impl FnOnce(&mut Sink<'_>) -> crate::Result<Format>,
) -> crate::Result<Checkpoint> {
    let meter = Meter::new(limits);
    let mut out = Gathered::default();
    let format = read(&mut Sink {
        out: &mut out,
        meter: &meter,
        scope: Scope::default(),
    })?;
    Ok(finish(out, path, format, meter.held()))
}

/// A reading whose tensors are no part of the checkpoint (an archive's example inputs, the
/// pickle half of a polyglot): within `meter`, into a sink of its own under `scope`; returns
/// its result and the globals it named.
pub(crate) fn apart<T>(
    meter: &Meter,
    scope: Scope,
    read: impl FnOnce(&mut Sink<'_>) -> T,
) -> (T, Vec<UnsafeGlobal>) {
    let mut out = Gathered::default();
    let result = read(&mut Sink {
        out: &mut out,
        meter,
        scope,
    });
    (result, out.unsafe_globals)
}

impl<'a> Sink<'a> {
    /// The read's memory account.
    pub fn meter(&self) -> &'a Meter {
        self.meter
    }

    /// How many nested archives enclose what this sink reads.
    pub fn archive_depth(&self) -> usize {
        self.scope.archives
    }

    /// A sink writing into the same checkpoint under `scope`, inside this one's.
    pub fn nested(&mut self, scope: Scope) -> Sink<'_> {
        Sink {
            scope: self.scope.around(scope),
            out: &mut *self.out,
            meter: self.meter,
        }
    }

    /// Adds one storage, numbered next.
    pub fn add_storage(&mut self, new: NewStorage) -> Arc<Storage> {
        let storage = Arc::new(self.build(self.out.storages.len(), new));
        self.out.storages.push(Arc::clone(&storage));
        storage
    }

    /// Adds a storage per item, in order, each described by `make` and built in parallel;
    /// returns them, or the first item's error.
    pub fn add_storages<T>(
        &mut self,
        items: impl IndexedParallelIterator<Item = T>,
        make: impl Fn(T) -> crate::Result<NewStorage> + Sync + Send,
    ) -> crate::Result<Vec<Arc<Storage>>> {
        let first = self.out.storages.len();
        let this = &*self;
        let built = super::in_order::try_map(items.enumerate(), |(i, item)| {
            Ok(Arc::new(this.build(first + i, make(item)?)))
        })?;
        self.out.storages.extend(built.iter().cloned());
        Ok(built)
    }

    fn build(&self, index: usize, new: NewStorage) -> Storage {
        let key = match self.scope.keys.as_str() {
            "" => new.key,
            prefix => format!("{prefix}{}", new.key).into(),
        };
        let storage = Storage::new(
            StorageId::new(index),
            key,
            new.dtype,
            new.nbytes,
            &new.location,
            new.data_ptr,
        );
        match new.saved_alone {
            true => storage.saved_alone(),
            false => storage,
        }
    }

    /// Adds a tensor named `name` in this scope.
    pub fn add_tensor(&mut self, name: impl Into<Arc<str>>, imp: Arc<TensorImpl>) {
        self.add_held_tensor(name, imp, None);
    }

    /// Adds a tensor named `name` in this scope, held as `held_as` (or as the scope says).
    pub fn add_held_tensor(
        &mut self,
        name: impl Into<Arc<str>>,
        imp: Arc<TensorImpl>,
        held_as: Option<HeldAs>,
    ) {
        let name = self.scope.name(name);
        let held_as = held_as.or(self.scope.held_as);
        self.out
            .tensors
            .push(Tensor::new(name, imp).with_held_as(held_as));
    }

    /// Adds tensors in order, named in this scope.
    pub fn add_tensors(&mut self, mut tensors: Vec<Tensor>) {
        if self.scope.names.is_empty() && self.scope.held_as.is_none() {
            // Taken as they are, without a copy into an empty list, unless the list has room
            // reserved for them (a reader adding its tensors a chunk at a time).
            match self.out.tensors.capacity() < tensors.len() && self.out.tensors.is_empty() {
                true => self.out.tensors = tensors,
                false => self.out.tensors.append(&mut tensors),
            }
            return;
        }
        self.out.tensors.reserve(tensors.len());
        for tensor in tensors {
            let name = self.scope.name(tensor.name());
            self.out.tensors.push(
                Tensor::new(name, Arc::clone(tensor.tensor_impl()))
                    .with_held_as(tensor.held_as().or(self.scope.held_as)),
            );
        }
    }

    /// Room for `more` tensors.
    pub fn reserve_tensors(&mut self, more: usize) {
        self.out.tensors.reserve(more);
    }

    /// Room for `more` storages, for a reader adding them a chunk at a time.
    pub fn reserve_storages(&mut self, more: usize) {
        self.out.storages.reserve(more);
    }

    /// How many tensors the checkpoint has so far: a mark for [`tensors_since`](Self::tensors_since).
    pub fn tensor_mark(&self) -> usize {
        self.out.tensors.len()
    }

    /// The tensors added since `mark`, as named in the checkpoint.
    pub fn tensors_since(&self, mark: usize) -> &[Tensor] {
        self.out.tensors.get(mark..).unwrap_or_default()
    }

    /// Adds a composite tensor, it and its components named in this scope.
    pub fn add_composite(&mut self, mut composite: CompositeTensor) {
        if !self.scope.names.is_empty() {
            composite.name = self.scope.name(composite.name.as_str()).to_string();
            for component in &mut composite.components {
                component.tensor = self.scope.name(component.tensor.as_str()).to_string();
            }
        }
        self.out.composites.push(composite);
    }

    /// Adds a tensor saved in chunks.
    pub fn add_chunked(&mut self, chunked: ChunkedTensor) {
        self.out.chunked.push(chunked);
    }

    /// Adds globals a pickle names, under this scope's members.
    pub fn add_unsafe_globals(&mut self, globals: impl IntoIterator<Item = UnsafeGlobal>) {
        let scope = &self.scope;
        self.out
            .unsafe_globals
            .extend(globals.into_iter().map(|g| scope.global(g)));
    }

    /// How many globals the checkpoint names so far: a mark for [`take_unsafe_globals`](Self::take_unsafe_globals).
    pub fn global_mark(&self) -> usize {
        self.out.unsafe_globals.len()
    }

    /// Keeps, of the globals added since `mark`, those `keep` keeps: what the loader's own
    /// imports register as safe globals it resolves, as it resolves its table.
    pub fn retain_unsafe_globals_since(
        &mut self,
        mark: usize,
        keep: impl Fn(&UnsafeGlobal) -> bool,
    ) {
        let mark = mark.min(self.out.unsafe_globals.len());
        let added = self.out.unsafe_globals.split_off(mark);
        self.out
            .unsafe_globals
            .extend(added.into_iter().filter(keep));
    }

    /// Takes back the globals added since `mark`, for a refusal to name them.
    pub fn take_unsafe_globals(&mut self, mark: usize) -> Vec<UnsafeGlobal> {
        let mark = mark.min(self.out.unsafe_globals.len());
        self.out.unsafe_globals.split_off(mark)
    }

    /// Puts back, in front and as they are, globals taken with
    /// [`take_unsafe_globals`](Self::take_unsafe_globals): what a nested reading set aside so that
    /// its refusal names only its own.
    pub fn restore_unsafe_globals(&mut self, mut globals: Vec<UnsafeGlobal>) {
        globals.append(&mut self.out.unsafe_globals);
        self.out.unsafe_globals = globals;
    }

    /// Every global named so far.
    pub fn unsafe_globals(&self) -> &[UnsafeGlobal] {
        &self.out.unsafe_globals
    }

    /// Values holding no tensor: `count` in all, the first `names` of them, named in this scope.
    pub fn add_left_out(&mut self, count: usize, names: Vec<String>) {
        let left_out = &mut self.out.left_out;
        let room = super::flatten::MAX_LEFT_OUT.saturating_sub(left_out.names.len());
        left_out.count += count;
        let scope = &self.scope;
        left_out.names.extend(
            names
                .into_iter()
                .take(room)
                .map(|name| scope.name(name).to_string()),
        );
    }

    /// The file's own metadata (a safetensors `__metadata__`).
    pub fn set_metadata(&mut self, metadata: BTreeMap<String, String>) {
        self.out.metadata = metadata;
    }

    /// Drops the metadata read so far: a shard's describes that file, not the set.
    pub fn clear_metadata(&mut self) {
        self.out.metadata.clear();
    }

    /// A chat template the file carries, as stored.
    pub fn add_chat_template(&mut self, template: ChatTemplate) {
        self.out.chat_templates.push(template);
    }

    /// A Keras v3 archive's model.
    pub fn set_keras(&mut self, model: KerasModel) {
        self.out.keras = Some(model);
    }

    /// A TorchScript archive's code.
    pub fn set_torchscript(&mut self, code: TorchScriptCode) {
        self.out.torchscript = Some(code);
    }

    /// Notes what `torch.load` would do with one more file or pickle: the first refusal stays.
    pub fn weights_only(&mut self, next: WeightsOnly) {
        // torch.load of the file never loads a nested archive: a pickle's bytes are bytes to it.
        if self.scope.archives > 0 {
            return;
        }
        self.out.weights_only = Some(match self.out.weights_only.take() {
            Some(so_far) => so_far.and(next),
            None => next,
        });
    }
}

/// What torch says rebuilding the tensors: the first that does not fit its storage.
fn rebuilt(tensors: &[Tensor]) -> WeightsOnly {
    tensors
        .iter()
        .find_map(|t| {
            set_storage(t)
                .err()
                .map(|reason| WeightsOnly::refuses(t.name(), reason))
        })
        .unwrap_or(WeightsOnly::Loads)
}

fn finish(out: Gathered, path: &Path, format: Format, held_bytes: u64) -> Checkpoint {
    let weights_only = out
        .weights_only
        .filter(|_| format.torch_load())
        .map(|w| w.and(rebuilt(&out.tensors)));
    Checkpoint {
        path: path.to_owned(),
        format,
        tensors: out.tensors,
        storages: out.storages,
        metadata: out.metadata,
        chat_templates: out.chat_templates,
        keras: out.keras,
        unsafe_globals: out.unsafe_globals,
        torchscript: out.torchscript,
        chunked: out.chunked,
        composites: out.composites,
        // Only where torch.load is the file's loader.
        weights_only,
        left_out: out.left_out,
        held_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Component, Device, Layout};

    fn storage(key: &str) -> NewStorage {
        NewStorage {
            key: key.into(),
            dtype: DType::Complex64,
            nbytes: 16,
            location: "cpu".into(),
            data_ptr: DataPtr::heap("t", vec![0; 16]),
            saved_alone: true,
        }
    }

    fn view(storage: &Arc<Storage>) -> Arc<TensorImpl> {
        Arc::new(
            TensorImpl::new(
                Layout::new([2], [1], 0).expect("layout"),
                DType::Complex64,
                Device::Cpu,
                false,
                false,
                Arc::clone(storage),
            )
            .with_conj_neg(true, false),
        )
    }

    /// A nested reading's storages get the member in their key and their next id, its tensors
    /// and composites their names, its globals their member; nothing else changes: a storage
    /// saved alone stays so, a view keeps its conj/neg bits and its sharing.
    #[test]
    fn a_nested_scope_names_keys_members_and_nothing_else() {
        let path = Path::new("f.pt2");
        let ckpt = gather(path, ReadLimits::default(), |sink| {
            let outer = sink.add_storage(storage("0"));
            sink.add_tensor("top", view(&outer));
            let mut nested = sink.nested(
                Scope::default()
                    .keys("data/weights/w.pt/")
                    .member("data/weights/w.pt"),
            );
            let mut item = nested.nested(Scope::default().under("extra.sp").member("x.distcp"));
            let inner = item.add_storage(storage("0"));
            let imp = view(&inner);
            item.add_tensor("<root>", Arc::clone(&imp));
            item.add_tensors(vec![Tensor::new("tied", Arc::clone(&imp))]);
            item.add_tensor("<root>.values", imp);
            item.add_composite(CompositeTensor {
                name: "<root>".into(),
                layout: "sparse_coo",
                shape: None,
                dtype: DType::Complex64,
                subclass: None,
                requires_grad: false,
                is_parameter: false,
                components: vec![Component {
                    role: "values".into(),
                    tensor: "<root>.values".into(),
                }],
                placements: None,
            });
            item.add_unsafe_globals([UnsafeGlobal {
                module: "os".into(),
                name: "system".into(),
                member: "data.pkl".into(),
                position: 3,
                payload: String::new(),
            }]);
            item.add_left_out(1, vec!["step".into()]);
            Ok(Format::Pt2)
        })
        .expect("gathered");
        let keys: Vec<(usize, &str)> = ckpt
            .storages
            .iter()
            .map(|s| (s.id().index(), s.key()))
            .collect();
        assert_eq!(keys, [(0, "0"), (1, "data/weights/w.pt/0")]);
        assert!(ckpt.storages[1].is_saved_alone());
        let names: Vec<&str> = ckpt.tensors.iter().map(Tensor::name).collect();
        assert_eq!(
            names,
            ["top", "extra.sp", "extra.sp.tied", "extra.sp.<root>.values"]
        );
        let (a, b) = (ckpt.tensors[1].tensor_impl(), ckpt.tensors[2].tensor_impl());
        assert!(Arc::ptr_eq(a, b), "the two names still share one view");
        assert!(a.is_conj() && !a.is_neg());
        assert!(Arc::ptr_eq(a.storage(), &ckpt.storages[1]));
        // A composite and its components are named as the tensors they are.
        assert_eq!(ckpt.composites[0].name, "extra.sp");
        assert_eq!(
            ckpt.composites[0].components[0].tensor,
            ckpt.tensors[3].name()
        );
        assert_eq!(
            ckpt.unsafe_globals[0].member,
            "data/weights/w.pt/x.distcp/data.pkl"
        );
        assert_eq!(ckpt.left_out.names, ["extra.sp.step"]);
    }
}
