"""A table shown a page at a time says which places of the order it shows."""

from streamlit.testing.v1 import AppTest


def _steps_page():
    import pandas as pd
    import streamlit as st

    from ui import paging

    steps = pd.DataFrame({"index": range(1, 251)}).iloc[::-1]  # newest first, as the dashboard shows them
    shown, note = paging.page(steps, 100, "steps_page", "steps")
    st.caption(f"Newest first{note}.")
    st.write(f"first shown: step {int(shown['index'].iloc[0])}")


def test_the_caption_counts_places_in_the_order_not_the_rows_own_numbers():
    at = AppTest.from_function(_steps_page, default_timeout=60).run()
    assert at.caption[0].value == "Newest first · 1–100 of 250 steps shown."
    assert "first shown: step 250" in at.markdown[0].value
    assert at.number_input[0].label == "Page (of 3, 100 steps each)"
    at.number_input[0].set_value(3).run()
    assert at.caption[0].value == "Newest first · 201–250 of 250 steps shown."
    assert "first shown: step 50" in at.markdown[0].value
