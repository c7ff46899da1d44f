from pytest_specdec.serving.pool import order_for_reuse


def test_groups_move_to_their_first_member():
    keys = ["a", None, "b", "a", None, "c", "b", "a"]
    order = order_for_reuse(keys)
    assert [keys[i] for i in order] == ["a", "a", "a", None, "b", "b", None, "c"]
    assert sorted(order) == list(range(len(keys)))


def test_already_grouped_order_is_unchanged():
    assert order_for_reuse(["a", "a", None, "b"]) == [0, 1, 2, 3]
    assert order_for_reuse([]) == []
