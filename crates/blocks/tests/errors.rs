//! Errors name the block path and the shapes; their exact text is kept
//! here. Shape errors are found when the model is compiled, data errors
//! when a batch is built.

mod common;

use common::rng;
use sheaf_autodiff::{Expr, Graph, Init, ParamStore};
use sheaf_blocks::*;

struct Pair {
    left: Vec<Vec<f32>>,
    right: f32,
}

fn message<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn a_shape_error_names_the_block_path() {
    let mut store = ParamStore::new();
    let w = store
        .add_param("w", [4, 5], Init::GlorotUniform, &mut rng(1))
        .unwrap();
    let fc = Function::new("fc", move |g: &mut Graph, x: Expr| {
        let w = g.param(&w);
        g.linear(w, x)
    });
    let model = Record::new((
        field("left", |p: &Pair| &p.left, Map::new(Tensor::new([3]) >> fc)),
        field("right", |p: &Pair| &p.right, Scalar),
    ));
    assert_eq!(
        message(Compiled::new(model)),
        "Record.left > Map > Function(fc): linear: expected input 1 of shape [5] (the columns of weight 1), given [4, 5], [3]"
    );
}

#[test]
fn layer_and_structure_errors_at_compile_time() {
    let mut store = ParamStore::new();
    let fc = FC::new(&mut store, "fc", 3, 2, Activation::Relu, &mut rng(2)).unwrap();
    assert_eq!(
        message(Compiled::new(Tensor::new([2]) >> fc)),
        "FC(fc): expected a vector [3], given tensor [2]"
    );

    let grow = Function::new("grow", |g: &mut Graph, (s, x): (Expr, Expr)| {
        g.concat(&[s, x])
    });
    let model = Map::new(Scalar) >> Fold::new(grow, Zeros::new([2]));
    assert_eq!(
        message(Compiled::new(model)),
        "Fold: the initial state and the state the function yields differ: tensor [2] vs tensor [3]"
    );

    let model = OneOf::<Option<f32>, Expr>::new()
        .case("some", |x: &Option<f32>| x.as_ref(), Scalar)
        .case(
            "none",
            |x: &Option<f32>| if x.is_none() { Some(&()) } else { None },
            Zeros::new([2]),
        );
    assert_eq!(
        message(Compiled::new(model)),
        "OneOf: cases `some` and `none` yield different types: tensor [1] vs tensor [2]"
    );

    assert_eq!(
        message(Compiled::new(
            Map::new(Scalar) >> Concat::<Vec<Expr>>::new()
        )),
        "Concat: expected a tuple of vectors, given sequence of tensor [1]"
    );

    let decl = ForwardDeclaration::<f32, Expr>::new("never", Ty::tensor([1]));
    assert_eq!(
        message(Compiled::new(decl.reference())),
        "ForwardDeclaration(never): the forward declaration `never` was never resolved"
    );
    decl.resolve(Scalar >> Zeros::new([3])).unwrap();
    assert_eq!(
        message(Compiled::new(decl.reference())),
        "ForwardDeclaration(never): the declared type and the definition's differ: tensor [1] vs tensor [3]"
    );
    assert_eq!(
        message(decl.resolve(Scalar)),
        "the forward declaration `never` is already resolved"
    );
}

#[test]
fn a_cycle_names_its_blocks() {
    let add = || Function::new("add", |g: &mut Graph, (a, b): (Expr, Expr)| g.add(a, b));
    let mut c = Composition::<f32, Expr>::new("loop");
    let x = c.add("x", Scalar);
    let a = c.add("a", add());
    let b = c.add(
        "b",
        Function::new("neg", |g: &mut Graph, x: Expr| g.scale(x, -1.0)),
    );
    c.reads_input(&x).unwrap();
    c.reads(&a, (&x, &b)).unwrap();
    c.reads(&b, &a).unwrap();
    c.output(&b).unwrap();
    assert_eq!(
        message(Compiled::new(c)),
        "Composition(loop): the wiring has a cycle: a -> b -> a"
    );

    let mut c = Composition::<f32, Expr>::new("loose");
    let x = c.add("x", Scalar);
    c.output(&x).unwrap();
    assert_eq!(
        message(Compiled::new(c)),
        "Composition(loose): block `x` reads nothing (wire it with reads or reads_input)"
    );
}

#[test]
fn data_errors_name_the_input_and_the_item() {
    let store = ParamStore::new();
    let mut c = Compiled::new(Map::new(Tensor::new([3])) >> Sum::new()).unwrap();
    let batch = vec![vec![vec![1.0f32; 3]], vec![vec![1.0; 3], vec![2.0; 2]]];
    assert_eq!(
        message(c.forward(&store, &batch)),
        "input 1 > Map[1] > Tensor[3]: a host array of 2 values cannot fill a tensor [3] (3 values)"
    );

    let mut store = ParamStore::new();
    let emb = Embedding::new(&mut store, "emb", 5, 2, Init::Zeros, &mut rng(3)).unwrap();
    let mut c = Compiled::new(emb).unwrap();
    assert_eq!(
        message(c.forward(&store, &[1u32, 9])),
        "input 1 > Embedding(emb): lookup: word id 9 is out of range for a table of 5 rows"
    );

    let model = OneOf::<i32, Expr>::new().case(
        "positive",
        |x: &i32| if *x > 0 { Some(&()) } else { None },
        Zeros::new([1]),
    );
    let mut c = Compiled::new(model).unwrap();
    assert_eq!(
        message(c.forward(&store, &[3, -1])),
        "input 1 > OneOf: no case matches the input (cases: positive)"
    );

    let pair = Function::new("pair", |g: &mut Graph, (a, b): (Expr, Expr)| g.add(a, b));
    let model =
        AllOf::new((Scalar >> Broadcast::new(), Scalar >> Broadcast::new())) >> ZipWith::new(pair);
    assert_eq!(
        message(Compiled::new(model)),
        "ZipWith: expected at least one finite sequence, given (repeated tensor [1], repeated tensor [1])"
    );
}

#[test]
fn errors_of_deep_recursion_are_cut_in_the_middle() {
    let e = (0..30).fold(BlockError::data("bad leaf"), |e, i| {
        e.within(format!("level{i}"))
    });
    assert_eq!(
        e.to_string(),
        "level29 > level28 > level27 > level26 > level25 > level24 > ... (18 more) ... > \
         level5 > level4 > level3 > level2 > level1 > level0: bad leaf"
    );
    assert_eq!(e.path().len(), 30);
}
