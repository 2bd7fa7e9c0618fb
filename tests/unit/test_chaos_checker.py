"""The chaos checker (tests/chaos/checker.py) on hand-made histories: each verdict fires on
the history that has the fault, and a sound history passes."""

from __future__ import annotations

import pytest

from tests.chaos.checker import Delivery, History, check, matrix

T0 = 1_000.0


def _sound() -> History:
    """Two groups, a then b: a1 a2 by w1, then the group handed over to w2 for a3; b by w2."""
    published = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]}
    deliveries = [
        Delivery("a1", "a", "w1", T0 + 1, T0 + 1.1),
        Delivery("b1", "b", "w2", T0 + 1.05, T0 + 1.2),
        Delivery("a2", "a", "w1", T0 + 2, T0 + 2.1),
        Delivery("a3", "a", "w2", T0 + 2.2, T0 + 2.3),
        Delivery("b2", "b", "w2", T0 + 2.5, T0 + 2.6),
    ]
    answers = [(T0 + 0.5 * i, 201) for i in range(6)]
    return History(published, {"a1", "a2", "a3", "b1", "b2"}, answers, deliveries)


def test_a_sound_history_passes_with_its_figures() -> None:
    verdict = check(_sound(), heal_at=T0 + 0.5)
    verdict.assert_sound(back_within_s=15)
    assert (verdict.lost, verdict.inversions, verdict.overlaps) == ([], {}, [])
    assert verdict.duplicates == 0 and verdict.unavailable == []
    assert verdict.delivery_back_s == pytest.approx(0.95)  # from b1 at 1.05 to a2 at 2.0
    assert "0 lost" in verdict.summary()


def test_an_acknowledged_message_never_delivered_is_loss() -> None:
    history = _sound()
    history.deliveries = [d for d in history.deliveries if d.id != "b2"]
    verdict = check(history)
    assert verdict.lost == ["b2"]
    with pytest.raises(AssertionError, match="never delivered"):
        verdict.assert_sound()


def test_a_message_published_but_not_acknowledged_may_be_missing() -> None:
    history = _sound()
    history.acked.discard("b2")
    history.deliveries = [d for d in history.deliveries if d.id != "b2"]
    check(history).assert_sound()


def test_a_group_first_delivered_out_of_publish_order_is_an_inversion() -> None:
    history = _sound()
    a2, a3 = history.deliveries[2], history.deliveries[3]
    history.deliveries[2:4] = [
        Delivery("a3", "a", "w1", a2.start, a2.end),
        Delivery("a2", "a", "w1", a3.start, a3.end),
    ]
    verdict = check(history)
    assert verdict.inversions == {"a": ["a1", "a3", "a2"]}
    with pytest.raises(AssertionError, match="order inverted"):
        verdict.assert_sound()


def test_a_redelivery_after_later_messages_is_a_duplicate_not_an_inversion() -> None:
    """Order is that of first deliveries; a redelivered a1 (at least once) counts apart."""
    history = _sound()
    history.deliveries.append(Delivery("a1", "a", "w2", T0 + 3, T0 + 3.1))
    verdict = check(history)
    assert verdict.inversions == {} and verdict.duplicates == 1
    verdict.assert_sound()


def test_two_senders_delivering_one_group_at_once_is_split_brain() -> None:
    history = _sound()
    # w2 begins a3 while w1's a2 is still unanswered (2.0 → 2.1).
    history.deliveries[3] = Delivery("a3", "a", "w2", T0 + 2.05, T0 + 2.3)
    verdict = check(history)
    [overlap] = verdict.overlaps
    assert (overlap.group, overlap.first.id, overlap.second.id) == ("a", "a2", "a3")
    with pytest.raises(AssertionError, match="two senders at once"):
        verdict.assert_sound()


def test_one_sender_back_to_back_or_two_groups_at_once_is_no_overlap() -> None:
    history = _sound()
    # b1 by w2 overlaps a1 by w1 in time: another group, so lawful.
    assert check(history).overlaps == []
    history.deliveries.append(Delivery("a3", "a", "w2", T0 + 2.3, T0 + 2.4))  # as a3 ends
    assert check(history).overlaps == []


def test_a_zombie_coming_back_after_the_heir_overlaps_the_heirs_delivery() -> None:
    history = _sound()
    history.deliveries.append(Delivery("a3", "a", "w1", T0 + 2.25, T0 + 2.5))
    [overlap] = check(history).overlaps
    assert (overlap.first.sender, overlap.second.sender) == ("w2", "w1")


def test_503_windows_run_from_the_first_refusal_to_the_next_acknowledgement() -> None:
    answers = [(T0, 201), (T0 + 1, 503), (T0 + 2, 0), (T0 + 3, 503), (T0 + 4.5, 201)]
    answers += [(T0 + 5, 503), (T0 + 6, 503)]  # still refused at the end
    history = _sound()
    history.answers = answers
    verdict = check(history)
    assert verdict.unavailable == [(T0 + 1, T0 + 4.5), (T0 + 5, T0 + 6)]
    assert "503 windows: 3.50s, 1.00s;" in verdict.summary()
    history.answers += [(T0 + 7 + i, s) for i in range(0, 6, 2) for s in (503, 201)]
    assert "(the longest 3 of 5)" in check(history).summary()
    assert verdict.refused == {503: 4, 0: 1}


def test_recovery_is_the_longest_time_without_a_success_after_the_heal() -> None:
    history = _sound()
    history.answers = [(T0, 201), (T0 + 10, 503), (T0 + 30, 201), (T0 + 31, 201)]
    verdict = check(history, heal_at=T0 + 10)
    assert verdict.publish_back_s == pytest.approx(20)
    with pytest.raises(AssertionError, match="publishing not back within 15 s"):
        verdict.assert_sound(back_within_s=15)
    verdict.assert_sound(back_within_s=None)  # recovery not asserted: the rest holds


def test_nothing_after_the_heal_is_never_back() -> None:
    history = _sound()
    verdict = check(history, heal_at=T0 + 100)
    assert verdict.publish_back_s == float("inf") and verdict.delivery_back_s == float("inf")
    with pytest.raises(AssertionError, match="not back"):
        verdict.assert_sound()


def test_stored_records_without_times_count_for_loss_and_order_only() -> None:
    published = {"a": ["a1", "a2"]}
    stored = [Delivery("a2", "a", "kafka", 0), Delivery("a1", "a", "kafka", 0)]
    verdict = check(History(published, {"a1", "a2"}, [(T0, 201)], stored), heal_at=T0)
    assert verdict.inversions == {"a": ["a2", "a1"]} and verdict.overlaps == []
    assert verdict.delivery_back_s is None and verdict.publish_back_s == 0


def test_the_matrix_has_a_line_per_run_with_its_figures() -> None:
    published = {"g": ["a", "b"]}
    answers = [(1.0, 201), (2.0, 503), (3.0, 201)]
    a, b = Delivery("a", "g", "w", 1.0, 1.1), Delivery("b", "g", "w", 2.0, 2.1)
    sound = check(History(published, {"a", "b"}, answers, [a, b]), 2.5)
    lossy = check(History(published, {"a", "b"}, answers, [b]), 2.5)
    lines = matrix([("test_x.py::a", sound), ("test_x.py::b", lossy)])
    assert len(lines) == 3 and lines[0].split()[:4] == ["run", "acked", "delivered", "lost"]
    assert lines[1].split()[:4] == ["test_x.py::a", "2", "2", "0"]
    assert lines[2].split()[:4] == ["test_x.py::b", "2", "1", "1"]
    assert "1.00s" in lines[1]  # the 503 window, 2.0 to 3.0
