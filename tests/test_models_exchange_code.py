"""Exchange code as the models need it: a tile's receive code is per distinct sender,
its send code per region sent (``poplar_api.lowering.memory._code_messages``).

On the tiny machine (8 tiles), tile 2 reads every other element of a tensor whose
pairs of elements alternate between tiles 0 and 1: it receives 12 separate regions
from 2 senders, and each sender sends 6 regions.
"""

from __future__ import annotations

from codelets_common import CopyVec, tiny_graph

from ipusim import ir
from ipusim.config import load_config
from poplar_api import FLOAT, Engine
from poplar_api import program as prog

CODE = load_config("tiny").code


def _engine(senders: int) -> Engine:
    """Tile 2 gathers x[::2] of x[24], whose pairs of elements cycle over ``senders``
    tiles (0, 1, ...)."""
    graph = tiny_graph()
    graph.addCodelets(CopyVec)
    x = graph.addVariable(FLOAT, [24], "x")
    for k in range(12):
        graph.setTileMapping(x[2 * k : 2 * k + 2], k % senders)
    y = graph.addVariable(FLOAT, [12], "y")
    graph.setTileMapping(y, 2)
    cs = graph.addComputeSet("gather")
    v = graph.addVertex(cs, CopyVec, {"src": x[::2], "dst": y})
    graph.setTileMapping(v, 2)
    graph.setPerfEstimate(v, 10)
    return Engine(graph, prog.Execute(cs))


def _exchange(engine: Engine) -> ir.Exchange:
    (step,) = [
        s for s in ir.iter_steps(engine.ir_program) if isinstance(s, ir.Exchange) and not s.host
    ]
    return step


def test_receive_code_is_per_sender_and_send_code_per_region():
    e = _engine(2)
    step = _exchange(e)
    at = {int(t): k for k, t in enumerate(step.tile)}
    assert step.messages_received[at[2]] == 12  # twelve separate regions (time)
    assert step.senders_received[at[2]] == 2  # from two tiles (code)
    assert step.messages_sent[at[0]] == step.messages_sent[at[1]] == 6
    assert step.senders_received[at[0]] == step.senders_received[at[1]] == 0
    code = e.memory.by_category["internalExchangeCode"]
    base, per = CODE.exchange_code_base_bytes, CODE.exchange_code_bytes_per_message
    assert code[:3].tolist() == [base + 6 * per, base + 6 * per, base + 2 * per]
    assert not code[3:].any()


def test_receive_code_grows_with_the_senders_not_the_regions():
    codes = []
    for senders in (1, 2):
        e = _engine(senders)
        codes.append(int(e.memory.by_category["internalExchangeCode"][2]))
        # every other element: 12 regions whichever tiles send them
        assert _exchange(e).messages_received.max() == 12
    assert codes[1] - codes[0] == CODE.exchange_code_bytes_per_message
